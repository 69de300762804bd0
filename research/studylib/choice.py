"""Does the policy choose per problem? Its held-out workflows against the best single workflow
and the oracle (issue 40).

For each held-out sample (``k`` per problem, in problem order) the exact expected reward of the
workflow written on that problem's kind (0 for a fallback or an invalid one, as the rewards give
it), next to what the best single workflow and each kind's own best (the oracle) get on the same
problem. Exact: the SIMULATED executor's analysis (operators/simulation/oracle.py); candidates
are the workflows a run with the call budget can write. Pure; torch-free but for
:func:`table_reward`, which reads labels as ``flowgrpo search --by`` does.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from functools import partial

from flowgrpo.operators.simulation import analyze, expected_reward
from flowgrpo.operators.simulation.oracle import kind_mix, oracle
from studylib.study import mean_interval

NEAR = 0.02  # "within 0.02 of the best" (issue 20, issue 40)


def choice_report(sim, problems: Sequence, workflows: Sequence[str | None], k: int) -> dict:
    """The held-out numbers of issue 40 for one policy.

    Args:
        sim: the run's regret settings (``operators.simulation.metrics.regret_settings``).
        problems: the held-out problems, in the order the samples were drawn.
        workflows: per sample, its canonical workflow or None (fallback or invalid).
        k: samples per problem.

    Returns ``policy_reward``, ``single_reward``, ``oracle_reward`` (means over the samples),
    ``vs_single`` and ``vs_single_ci95`` (the policy minus the best single workflow: the mean
    and 95% half-width over problems), ``gap_closed`` (share of the oracle gap closed; None
    without a gap), the ``single`` workflow, and ``by_kind``: per kind, its most-written
    workflow, its share, whether it is within 0.02 of that kind's best, and the kind's best.
    """
    if len(workflows) != len(problems) * k:
        raise ValueError(f"{len(workflows)} workflows for {len(problems)} problems x {k}")
    params, limits = sim.params, sim.limits
    best = oracle(params, kind_mix(params, problems), None, limits, sim.tradeoff)
    kinds = [params.kind_of(p) for p in problems for _ in range(k)]

    reward = partial(exact_reward, sim)  # (workflow, kind) -> exact expected reward
    own = [reward(w, kind) for w, kind in zip(workflows, kinds)]
    single = [best.single_by_kind[kind] for kind in kinds]
    top = [best.per_kind[kind].reward for kind in kinds]
    per_problem = [statistics.mean(own[g * k : (g + 1) * k]) - single[g * k]
                   for g in range(len(problems))]  # fmt: skip
    diff, half = mean_interval(per_problem)
    policy, single_mean, oracle_mean = map(statistics.mean, (own, single, top))
    gap = oracle_mean - single_mean
    return {
        "policy_reward": policy,
        "single_reward": single_mean,
        "oracle_reward": oracle_mean,
        "vs_single": diff,
        "vs_single_ci95": half,
        "gap_closed": (policy - single_mean) / gap if gap > 1e-9 else None,
        "single": best.single.workflow,
        "by_kind": _by_kind(workflows, kinds, best, reward),
    }


def pick_reward(sim, problems: Sequence, workflow: str) -> float:
    """The exact expected reward of one workflow used for every problem of ``problems`` (the
    pick of ``flowgrpo search``), as :func:`choice_report` scores the policy's samples."""
    return statistics.mean(exact_reward(sim, workflow, sim.params.kind_of(p)) for p in problems)


def table_reward(sim, problems: Sequence, table: dict, keys: Sequence[str]) -> dict:
    """A table from label to workflow (``flowgrpo search --by``'s first picks) used as it is:
    each problem gets its label's workflow (``label_of``: the ``meta`` values of ``keys`` joined
    by "/"), scored exactly as :func:`choice_report` scores the policy's samples. A label the
    table lacks scores 0, as a fallback would; ``missing`` counts those problems."""
    # heavy: the trainer's label_of (one definition of a label) imports torch
    from flowgrpo.trainer.search.by_label import label_of

    picks = [table.get(label_of(p, keys)) for p in problems]
    rewards = [exact_reward(sim, w, sim.params.kind_of(p)) for w, p in zip(picks, problems)]
    return {"reward": statistics.mean(rewards), "missing": picks.count(None)}


def exact_reward(sim, workflow: str | None, kind: str) -> float:
    """The exact expected reward of ``workflow`` on problems of ``kind`` (0 for None: a
    fallback or an invalid workflow, as the rewards give it)."""
    if workflow is None:
        return 0.0
    return expected_reward(analyze(workflow, sim.params, kind, sim.limits), sim.tradeoff)


def _by_kind(workflows, kinds, best, reward) -> dict:
    written = defaultdict(list)
    for workflow, kind in zip(workflows, kinds):
        written[kind].append(workflow)
    out = {}
    for kind, texts in sorted(written.items()):
        valid = [t for t in texts if t is not None]
        mode, count = Counter(valid).most_common(1)[0] if valid else (None, 0)
        own = best.per_kind[kind]
        near = mode is not None and own.reward - reward(mode, kind) <= NEAR
        out[kind] = {"mode": mode, "share": count / len(texts), "near_best": near,
                     "best": own.workflow}  # fmt: skip
    return out


def kinds_near_best(report: dict) -> tuple[int, int]:
    """(kinds whose most-written workflow is within 0.02 of the kind's best, distinct modes)."""
    by_kind = report["by_kind"].values()
    return sum(v["near_best"] for v in by_kind), len({v["mode"] for v in by_kind})


def _f(value) -> str:
    return "–" if value is None or value != value else f"{value:.3f}"


def choice_table(start: dict | None, runs: list[dict]) -> str:
    """Markdown: per seed, the held-out reward of the policy, the best single workflow and the
    oracle, the policy minus the single one (95% interval over problems), the gap closed, and
    how many kinds' most-written workflow is near that kind's best (of how many kinds, with how
    many distinct modes)."""
    lines = [
        "| seed | policy E[reward] | best single | oracle | policy − single (95% CI) | "
        "gap closed | kinds near best / kinds (distinct modes) | search, same calls |",
        "|---|---|---|---|---|---|---|---|",
    ]
    done = [run for run in runs if "choice" in run.get("eval", {})]  # older records: none
    rows = ([("start", start["choice"])] if start and "choice" in start else []) + [
        (str(run["seed"]), run["eval"]["choice"]) for run in done
    ]
    for name, c in rows:
        near, modes = kinds_near_best(c)
        lines.append(
            f"| {name} | {_f(c['policy_reward'])} | {_f(c['single_reward'])} | "
            f"{_f(c['oracle_reward'])} | {_f(c['vs_single'])} ± {_f(c['vs_single_ci95'])} | "
            f"{_f(c['gap_closed'])} | {near} / {len(c['by_kind'])} ({modes}) | "
            f"{_search(c.get('search'))} |"
        )
    if start and (table := start.get("choice", {}).get("table")):
        c = start["choice"]
        gap = c["oracle_reward"] - c["single_reward"]
        closed = (table["reward"] - c["single_reward"]) / gap if gap > 1e-9 else None
        lines.append(
            f"| the search's table by label, as it is | {_f(table['reward'])} | "
            f"{_f(c['single_reward'])} | {_f(c['oracle_reward'])} | "
            f"{_f(table['reward'] - c['single_reward'])} | {_f(closed)} | – | "
            f"{table['calls']:,} calls (the start's search) |"
        )
    above = sum(r["eval"]["choice"]["vs_single"] - r["eval"]["choice"]["vs_single_ci95"] > 0
                for r in done)  # fmt: skip
    lines.append(f"\nSeeds whose interval lies above the best single workflow: {above} of "
                 f"{len(done)}.")  # fmt: skip
    return "\n".join(lines)


def _search(found: dict | None) -> str:
    if not found:
        return "–"
    return f"{_f(found['reward'])} ({found['calls']:,} calls)"


def choice_markdown(results: dict, command: str) -> str:
    """Every world's :func:`choice_table` under one heading (``results``: world name ->
    ``{"start", "runs"}``, as the study's JSON holds them)."""
    parts = ["# Choosing per problem: the policy against the best single workflow (SIMULATED "
             "executor)", "", f"Command: `{command}`. Exact expected rewards of the held-out "
             "samples (studylib/choice.py).", ""]  # fmt: skip
    for name, world in results.items():
        parts += [f"## {name}", "", choice_table(world.get("start"), world.get("runs", [])), ""]
    return "\n".join(parts)


__all__ = [
    "NEAR",
    "choice_markdown",
    "choice_report",
    "choice_table",
    "kinds_near_best",
    "pick_reward",
    "table_reward",
]
