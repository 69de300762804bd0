"""Tables and figures of the collapse study (``research/reproduce_collapse.py``): one row per
run from its run directory, then per-configuration means with 95% intervals over seeds, the
guard's false-positive and detection rates, and the figures, into ``OUT/collapse_study.md`` (a
file of its own, which the docs link; no doc is edited in place)."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from studylib.study import (
    OLD_RULE,
    collapse_onset,
    guard_rates,
    mean_interval,
    series,
    wilson_interval,
)

from flowgrpo.files import replace_text
from flowgrpo.trainer.monitoring.collapse import replay
from flowgrpo.trainer.reports.diagnose import load_health_config, read_jsonl
from flowgrpo.trainer.reports.plots import save

#: The section's file under ``out`` (research/records/ by default; docs/RESULTS.md links it).
SECTION_FILE = "collapse_study.md"
HISTORY_KEYS = (
    "step",
    "fallback_rate",
    "validity_rate",
    "num_completions",
    "rollback",
    "skipped_update",
)  # what the guard rules read (replayed in guard_table)
TAIL = 3  # "end" values are means over the last TAIL rollouts (one rollout is 16 samples)


def summarize(name: str, lr: float, seed: int, run_dir: Path) -> dict:
    """One run's row: the collapse rule's verdicts (the run's own rule), end values, series."""
    health, _ = load_health_config(run_dir)
    history = read_jsonl(run_dir / "metrics.jsonl")
    detector = replay(history, health.collapse_rule)
    keys = ("fallback_rate", "validity_rate", "sim/regret", "entropy", "sim/best_share")
    curves = {key: series(history, key) for key in keys}

    def end(key):
        return mean_interval(curves[key][-TAIL:])[0]

    return {
        "config": name,
        "lr": lr,
        "seed": seed,
        "steps": len(history),
        "collapses": detector.collapses,
        "updates": detector.updates,
        "collapsed": collapse_onset(history) is not None,
        "fallback_end": end("fallback_rate"),
        "validity_end": end("validity_rate"),
        "regret_start": curves["sim/regret"][0],
        "regret_end": end("sim/regret"),
        "entropy_end": end("entropy"),
        "rollbacks": sum(bool(m.get("rollback")) for m in history),
        "groups": group_kinds(run_dir / "samples.jsonl"),
        "step_s": statistics.mean(m["step_time"] for m in history),
        "series": curves,
        "history": [{k: m.get(k) for k in HISTORY_KEYS} for m in history],
    }


KINDS = ("prose", "invalid", "wrong", "correct")  # fallback, invalid DSL, valid-wrong, correct


def _kind(sample: dict) -> str:
    if sample.get("fallback"):
        return "prose"
    if not sample.get("valid"):
        return "invalid"
    return "correct" if sample.get("correct") else "wrong"


def group_kinds(path: Path) -> dict:
    """What the run's groups held (``samples.jsonl``, grouped by step and problem): how many
    groups, how many put a correct completion next to a valid-but-wrong one (the seed's collapse
    mechanism: the wrong one, rewarded 0.2, gets a negative advantage), how many tied (all
    rewards equal, no gradient), and the share of negative advantage mass on each kind."""
    by_group = defaultdict(list)
    for sample in read_jsonl(path) if path.is_file() else []:
        by_group[(sample["step"], sample["problem_id"])].append(sample)
    counts = {"groups": len(by_group), "correct_and_wrong": 0, "tied": 0}
    negative = dict.fromkeys(KINDS, 0.0)
    for members in by_group.values():
        kinds = {_kind(m) for m in members}
        counts["correct_and_wrong"] += {"correct", "wrong"} <= kinds
        counts["tied"] += len({round(m["reward"], 9) for m in members}) == 1
        for m in members:
            negative[_kind(m)] += max(0.0, -float(m.get("advantage") or 0.0))
    total = sum(negative.values())
    return {**counts, **{f"neg_{k}": v / total if total else 0.0 for k, v in negative.items()}}


def groups(runs: list[dict]) -> dict[tuple[str, float], list[dict]]:
    out = defaultdict(list)
    for run in runs:
        out[(run["config"], run["lr"])].append(run)
    return dict(out)


def _ci(values, digits=2) -> str:
    mean, half = mean_interval(values)
    if math.isnan(mean):
        return "–"
    return f"{mean:.{digits}f}" + ("" if math.isnan(half) else f" ± {half:.{digits}f}")


def config_table(runs: list[dict]) -> str:
    """Per (configuration, lr): pooled per-update collapse rate with its Wilson interval, runs
    that collapsed, and end values (mean ± 95% t-interval over seeds)."""
    lines = [
        "| config | lr | seeds | updates → collapse (rate, 95% CI) | runs collapsed | "
        "fallback end | validity end | regret start → end | entropy end | rollbacks | s/step |",
        "|" + "---|" * 11,
    ]
    for (name, lr), rows in groups(runs).items():
        c, n = sum(r["collapses"] for r in rows), sum(r["updates"] for r in rows)
        lo, hi = wilson_interval(c, n)
        rate = f"{c}/{n} = {c / n:.2f} [{lo:.2f}, {hi:.2f}]" if n else "–"
        lines.append(
            f"| {name} | {lr:g} | {len(rows)} | {rate} | "
            f"{sum(r['collapsed'] for r in rows)}/{len(rows)} | "
            f"{_ci([r['fallback_end'] for r in rows])} | "
            f"{_ci([r['validity_end'] for r in rows])} | "
            f"{_ci([r['regret_start'] for r in rows])} → {_ci([r['regret_end'] for r in rows])} | "
            f"{_ci([r['entropy_end'] for r in rows])} | {sum(r['rollbacks'] for r in rows)} | "
            f"{statistics.mean(r['step_s'] for r in rows):.1f} |"
        )
    return "\n".join(lines)


def guard_table(runs: list[dict]) -> str:
    """The z-test rule (the default) and the round-1 fixed-jump rule, replayed on every run the
    guard left alone (a rollback changes what follows, so those runs cannot be replayed), over
    all of them and over those at the lowest learning rate (the good runs)."""
    from flowgrpo.trainer.monitoring.collapse import CollapseRule

    untouched = [r for r in runs if not r["rollbacks"]]
    scopes = [("all", untouched)]
    if untouched:
        low = min(r["lr"] for r in untouched)
        scopes.append((f"lr {low:g}", [r for r in untouched if r["lr"] == low]))
    lines = [
        "| rule | runs | runs without collapse it fired on | their updates it fired on "
        "(95% CI) | collapsed runs it detected | delay after onset (steps) |",
        "|---|---|---|---|---|---|",
    ]
    for label, rule in (
        ("z-test, alpha 0.01, ≥ 16 completions, change ≥ 0.2", CollapseRule(alpha=0.01)),
        (f"z-test, alpha {CollapseRule().alpha:g} (default)", CollapseRule()),
        ("round 1: fallback jump ≥ 0.3", OLD_RULE),
    ):
        for scope, chosen in scopes:
            g = guard_rates([r["history"] for r in chosen], rule)
            lo, hi = wilson_interval(g.ok_updates_flagged, g.ok_updates)
            delays = ", ".join(map(str, g.delays)) or "–"
            lines.append(
                f"| {label} | {scope} | {g.ok_runs_flagged}/{g.ok_runs} | "
                f"{g.ok_updates_flagged}/{g.ok_updates} [{lo:.3f}, {hi:.3f}] | "
                f"{g.collapsed_detected}/{g.collapsed_runs} | {delays} |"
            )
    return "\n".join(lines)


def group_table(runs: list[dict]) -> str:
    """Per (configuration, lr), pooled over seeds: where the gradient's push-down went."""
    lines = [
        "| config | lr | groups | with a correct and a valid-wrong completion | tied (no "
        "gradient) | negative advantage on: prose / invalid DSL / valid-wrong / correct |",
        "|---|---|---|---|---|---|",
    ]
    for (name, lr), rows in groups(runs).items():
        g = [r["groups"] for r in rows if r["groups"]["groups"]]
        n = sum(x["groups"] for x in g)
        if not n:
            continue
        mixed, tied = sum(x["correct_and_wrong"] for x in g), sum(x["tied"] for x in g)
        mass = " / ".join(f"{statistics.mean(x[f'neg_{k}'] for x in g):.2f}" for k in KINDS)
        lines.append(f"| {name} | {lr:g} | {n} | {mixed / n:.3f} | {tied / n:.3f} | {mass} |")
    return "\n".join(lines)


PLOT_KEYS = (("fallback_rate", "fallback rate"), ("sim/regret", "regret (SIMULATED executor)"),
             ("entropy", "token entropy (nats)"))  # fmt: skip
DASHES = {"k2_grpo": "-", "k8_grpo": "--", "default": ":", "default_warn": "-."}


def _curves(axes, rows: list[dict], label: str, **style) -> None:
    """Mean over seeds of each key (band: min..max over seeds) on one row of axes."""
    for ax, (key, name) in zip(axes, PLOT_KEYS, strict=True):
        width = min(len(r["series"][key]) for r in rows)
        columns = [[r["series"][key][i] for r in rows] for i in range(width)]
        steps = range(1, width + 1)
        (line,) = ax.plot(steps, [mean_interval(c)[0] for c in columns], label=label, **style)
        lows, highs = [min(c) for c in columns], [max(c) for c in columns]
        ax.fill_between(steps, lows, highs, color=line.get_color(), alpha=0.08)
        ax.set_xlabel("step")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)


def plot(runs: list[dict], out: Path) -> list[Path]:
    """Top row: every configuration at the lowest learning rate (colour: configuration).
    Bottom row, when there is a sweep: the other rates (colour: lr; line style: configuration)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    by_config = groups(runs)
    low = min(lr for _, lr in by_config)
    rates = sorted({lr for _, lr in by_config if lr != low})
    fig, axes = plt.subplots(1 + bool(rates), 3, figsize=(15, 4 + 4 * bool(rates)), squeeze=False)
    colours = plt.get_cmap("plasma")
    for (name, lr), rows in by_config.items():
        if lr == low:
            _curves(axes[0], rows, f"{name} lr {lr:g}", marker="o", ms=2)
        else:
            colour = colours(0.85 * rates.index(lr) / max(1, len(rates) - 1))
            style = {"color": colour, "linestyle": DASHES.get(name, "-"), "lw": 1.6}
            _curves(axes[1], rows, f"{name} lr {lr:g}", **style)
    for row in axes:
        row[0].legend(fontsize=7)
    path = save(fig, out / "collapse_study.png", dpi=100)  # a user's file there is refused
    plt.close(fig)
    return [path]


def write(
    runs: list[dict],
    out: Path,
    command: str,
    environment: str,
    runs_dir: str,
    missing: Sequence[str] = (),
) -> Path:
    """Write the section to ``out/collapse_study.md`` (replaced whole); ``missing`` names
    planned runs that were not found (said in the section, not hidden)."""
    figures = plot(runs, out / "figures")
    absent = f" Planned but not run, so left out: {', '.join(missing)}." if missing else ""
    section = "\n".join([
        "# The K=2 collapse study (known-optimum environment, SIMULATED executor)",
        "",
        f"Command: {command}.{absent} {environment} Accuracies come from the SIMULATED executor "
        "(operators/simulation), not from an LLM. **Small-scale results**: a 135M policy on one "
        "CPU for a few steps; they show mechanisms, not production numbers.",
        "",
        "Per configuration (mean ± 95% Student-t half-width over seeds; 'end' = mean of the last "
        f"{TAIL} rollouts). An update → collapse is what the run's guard rule decided; a run "
        "collapsed when its last 3 rollouts' fallback rate is ≥ 0.3 above its first rollout's "
        "(drawn before any update; or its validity ≥ 0.3 below), a truth that does not use the "
        "rule.",
        "",
        config_table(runs),
        "",
        "The collapse guard's rules replayed on the runs above whose guard undid nothing "
        "(false positives: firings on runs that did not collapse; detection: collapsed runs it "
        "fired on):",
        "",
        guard_table(runs),
        "",
        "What the groups held (every sampled completion, `samples.jsonl`; a valid-wrong "
        "completion next to a correct one is the seed's collapse mechanism; the last column is "
        "the mean over seeds of each kind's share of the negative advantage):",
        "",
        group_table(runs),
        "",
        *[f"![{p.stem}]({p.relative_to(out)})" for p in figures],
        "",
        f"Raw runs (not committed): `{runs_dir}/<config>_lr<lr>_seed<N>/`; the rows with their "
        "series: `collapse_study.json`.",
    ])  # fmt: skip
    path = out / SECTION_FILE
    replace_text(path, section + "\n")
    return path
