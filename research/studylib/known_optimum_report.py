"""The known-optimum study's section (``OUT/known_optimum.md``): per-seed table, means with 95%
intervals, the choice table (issue 40) and a figure of regret over training. Written by
``research/learn_known_optimum.py`` from its saved runs."""

from __future__ import annotations

import platform
import sys
from pathlib import Path

from flowgrpo.files import replace_text
from studylib.choice import choice_table
from studylib.study import mean_interval

TAIL = 5  # "first"/"last" training values: means over this many rollouts (16 completions each)
ORDER = ("sim/expected_accuracy", "sim/regret", "sim/valid_regret", "pass@1", "validity_rate")
SERIES_KEYS = ("sim/regret", "sim/valid_regret", "sim/expected_accuracy", "entropy")


def _ci(values) -> str:
    mean, half = mean_interval([v for v in values if v is not None])
    return _f(mean) + ("" if half != half else f" ± {half:.3f}")  # half != half: NaN


def _f(value) -> str:
    """A number to 3 decimals; "–" for None (e.g. valid-only regret with no valid sample)."""
    return "–" if value is None or value != value else f"{value:.3f}"


def _first_last(run: dict, key: str) -> tuple[float, float]:
    values = run["series"][key]
    return mean_interval(values[:TAIL])[0], mean_interval(values[-TAIL:])[0]


def table(start: dict, runs: list[dict]) -> str:
    """Per seed: training regret (all / valid-only) first → last, the held-out numbers."""
    lines = [
        f"| seed | regret, first {TAIL} steps → last {TAIL} | valid-only regret, first → last "
        "| held-out E[acc] | held-out regret | held-out valid-only regret | held-out pass@1 "
        "(simulated runs) | held-out validity | entropy, last step |",
        "|---|---|---|---|---|---|---|---|---|",
        "| start | – | – | " + " | ".join(_f(start[k]) for k in ORDER) + " | – |",
    ]
    for run in runs:
        e, (r0, r1), (v0, v1) = run["eval"], *(_first_last(run, k) for k in SERIES_KEYS[:2])
        lines.append(
            f"| {run['seed']} | {_f(r0)} → {_f(r1)} | {_f(v0)} → {_f(v1)} | "
            + " | ".join(_f(e[k]) for k in ORDER)
            + f" | {_f(run['series']['entropy'][-1])} |"
        )
    pairs = {k: list(zip(*(_first_last(r, k) for r in runs), strict=True)) for k in SERIES_KEYS[:2]}
    lines.append(
        f"| **mean ± 95% CI** | {_ci(pairs['sim/regret'][0])} → {_ci(pairs['sim/regret'][1])} | "
        f"{_ci(pairs['sim/valid_regret'][0])} → {_ci(pairs['sim/valid_regret'][1])} | "
        + " | ".join(_ci([r["eval"][k] for r in runs]) for k in ORDER)
        + f" | {_ci([r['series']['entropy'][-1] for r in runs])} |"
    )
    return "\n".join(lines)


def plot(runs: list[dict], path: Path) -> Path:
    from flowgrpo.trainer.reports.plots import seed_panels

    labels = {key: key if key == "entropy" else f"{key} (SIMULATED executor)"
              for key in ("sim/regret", "sim/valid_regret", "entropy")}  # fmt: skip
    return seed_panels([run["series"] for run in runs], labels, path)


def section(args, start: dict, runs: list[dict], figure: Path, numbers: str) -> str:
    import torch

    argv = " ".join(a for a in sys.argv[1:] if a != "--from-runs")
    model = "tiny random (smoke)" if args.smoke else "SmolLM2-135M-Instruct + LoRA r16"
    return "\n".join([
        "# Learning in the known-optimum environment (SIMULATED executor)",
        "",
        f"Command: `python research/learn_known_optimum.py {argv}`"
        f"{' (evaluated with --from-runs)' if args.from_runs else ''}. Machine: "
        f"{platform.machine()}, CPU only, Python {platform.python_version()}, torch "
        f"{torch.__version__}. Policy: {model}, config `{args.config}`, "
        f"{runs[0]['steps']} steps, seeds {' '.join(str(r['seed']) for r in runs)}. Held-out: "
        f"{args.eval_n} test problems × {args.eval_k} sampled workflows, scored by the SIMULATED "
        "executor (accuracies from a model of operators, not an LLM); E[acc] and regret are "
        "exact expectations of the workflows written, pass@1 the simulated runs' outcome. The "
        "same numbers per run: `flowgrpo eval --adapter RUN/checkpoint-N --executor simulated "
        f"--n {args.eval_n} --k {args.eval_k}`.",
        "",
        table(start, runs),
        "",
        "Choosing per problem (issue 40): the same held-out samples, each workflow's exact "
        "expected reward on its problem's kind against the best single workflow and each kind's "
        "own best (studylib/choice.py).",
        "",
        choice_table(start, runs),
        "",
        f"![known_optimum]({figure.relative_to(Path(args.out))})",
        "",
        f"Raw runs (not committed): `{args.runs_dir}/seed<N>/`; numbers: `{numbers}`.",
    ])  # fmt: skip


def figure_of(numbers: Path) -> Path:
    """The figure of the study whose JSON is ``numbers``: ``figures/known_optimum[-TAG].png``."""
    return numbers.parent / "figures" / f"{numbers.stem}.png"


def write(args, start: dict, runs: list[dict], numbers: Path) -> Path:
    """The section and its figure, named as the study's JSON ``numbers`` (which the study
    saves itself): ``known_optimum[-TAG].md`` and ``figures/known_optimum[-TAG].png``, so a
    tagged study never replaces the untagged record."""
    figure = plot(runs, figure_of(numbers))
    path = numbers.with_suffix(".md")
    replace_text(path, section(args, start, runs, figure, numbers.name) + "\n")
    return path
