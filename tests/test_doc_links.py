"""Every relative link in the project's Markdown reaches its file, and its ``#anchor`` a heading.

docs/RESULTS.md cites the research record by section (``RECORD.md#...``); a heading renamed
there would leave the finding without its command and numbers. Anchors are GitHub's: the
heading's text lower-cased, links reduced to their text, characters other than letters, digits,
``_``, ``-`` and spaces dropped, spaces turned into ``-``, a repeated heading suffixed ``-1``,
``-2``, ... Headings inside fenced code blocks are not headings. Links with a scheme
(``https:``, ``mailto:``) are not checked.
"""

from __future__ import annotations

import re
from collections import Counter
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIPPED = {"runs", ".git", "build", "dist", ".venv", "node_modules"}
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def markdown_files(root: Path) -> list[Path]:
    return sorted(
        p
        for p in root.rglob("*.md")
        if not any(d in SKIPPED or d.endswith(".egg-info") for d in p.relative_to(root).parts)
    )


@cache
def links(path: Path) -> tuple[str, ...]:
    return tuple(LINK.findall(path.read_text(encoding="utf-8")))


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives the headings of one Markdown text."""
    seen: Counter[str] = Counter()
    found: set[str] = set()
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match is None:
            continue
        words = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", match.group(2))
        slug = re.sub(r"[^\w\- ]", "", words.lower()).replace(" ", "-")
        found.add(slug if seen[slug] == 0 else f"{slug}-{seen[slug]}")
        seen[slug] += 1
    return found


@cache
def anchors_of(path: Path) -> frozenset[str]:
    return frozenset(anchors(path.read_text(encoding="utf-8")))


def broken_links(path: Path) -> list[str]:
    """``'file: link (why)'`` for each relative link of ``path`` that does not resolve."""
    broken = []
    for link in links(path):
        if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", link):
            continue
        target_name, _, anchor = link.partition("#")
        target = (path.parent / target_name) if target_name else path
        if not target.exists():
            broken.append(f"{path.name}: {link} (no such file)")
        elif anchor and target.suffix == ".md" and anchor not in anchors_of(target):
            broken.append(f"{path.name}: {link} (no heading with this anchor)")
    return broken


def test_anchor_rules_match_githubs() -> None:
    text = (
        "# Results\n## `flowgrpo train`: the default run (issue 20, 2026-11-28)\n"
        "```\n# not a heading\n```\n## Results\n### See [the record](x.md#y)\n"
    )
    assert anchors(text) == {
        "results",
        "flowgrpo-train-the-default-run-issue-20-2026-11-28",
        "results-1",
        "see-the-record",
    }


def test_the_checker_finds_a_missing_file_and_a_missing_anchor(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text("# Only this\n", encoding="utf-8")
    page = tmp_path / "a.md"
    page.write_text(
        "[ok](b.md#only-this) [gone](c.md) [moved](b.md#not-this) [web](https://x.org/#q)\n"
        "# Here\n[self](#here) [self-bad](#there)\n",
        encoding="utf-8",
    )
    assert broken_links(page) == [
        "a.md: c.md (no such file)",
        "a.md: b.md#not-this (no heading with this anchor)",
        "a.md: #there (no heading with this anchor)",
    ]


def test_every_link_in_the_repository_resolves() -> None:
    files = markdown_files(ROOT)
    assert ROOT / "docs" / "RESULTS.md" in files  # a broken glob would pass vacuously
    assert sum(len(links(p)) for p in files) > 50
    broken = [b for p in files for b in broken_links(p)]
    assert not broken, "links that do not resolve:\n" + "\n".join(broken)
