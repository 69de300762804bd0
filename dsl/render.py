"""Human and JSON renderings of validation reports (used by ``flowgrpo validate``)."""

from __future__ import annotations

import dataclasses

from flowgrpo.dsl.validate import Problem, Report


def report_to_dict(report: Report) -> dict:
    """A JSON-ready dict of a report (the AST is represented by its canonical text)."""

    return {
        "text": report.text,
        "ok": report.ok,
        "canonical": report.canonical,
        "structure": report.structure,
        "features": sorted(report.features),
        "operators": list(report.operators),
        "calls": report.calls,
        "errors": [dataclasses.asdict(p) for p in report.errors],
        "warnings": [dataclasses.asdict(p) for p in report.warnings],
    }


#: Characters of an input a human report shows at most (on each side of a caret): a 10 MB
#: input is reported, not echoed back.
SHOWN = 80


def clip(text: str, limit: int = 2 * SHOWN) -> str:
    """``text``, or its start and its length when longer than ``limit`` characters."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text):,} characters)"


def format_problem(problem: Problem, text: str, kind: str = "error") -> str:
    """One problem with (up to :data:`SHOWN` characters each side of it) the source line and a
    caret under its column."""
    head = f"  {kind} {problem.code} at {problem.line}:{problem.column}: {problem.message}"
    lines = text.splitlines() or [""]
    out = [head]
    if 1 <= problem.line <= len(lines):
        source, column = lines[problem.line - 1], max(problem.column - 1, 0)
        start = max(column - SHOWN, 0)
        shown = source[start : column + SHOWN]
        lead, tail = ("..." if start else ""), ("..." if column + SHOWN < len(source) else "")
        caret = " " * (len(lead) + column - start) + "^"
        out += [f"    {lead}{shown}{tail}", f"    {caret}"]
    if problem.hint:
        out.append(f"    hint: {problem.hint}")
    return "\n".join(out)


def format_report(report: Report) -> str:
    """A multi-line human report: verdict, canonical form, structure, then every problem."""
    if report.ok:
        head = (
            f"valid    {clip(report.canonical)}    "
            f"[{report.structure}, {report.calls} call{'s' if report.calls != 1 else ''}]"
        )
    else:
        head = f"invalid  {clip(report.text)}"
    lines = [head]
    if not report.ok and report.canonical is not None and report.canonical != report.text:
        lines.append(f"  canonical: {clip(report.canonical)}")
    lines += [format_problem(p, report.text, "error") for p in report.errors]
    lines += [format_problem(p, report.text, "warning") for p in report.warnings]
    return "\n".join(lines)
