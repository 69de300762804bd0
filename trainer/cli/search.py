"""``flowgrpo search``: the best single workflow for a config's task, executor and reward."""

from __future__ import annotations

import json
from pathlib import Path

import click

from flowgrpo.configuration import ConfigError
from flowgrpo.trainer.cli.common import (
    config_options,
    count_option,
    fail,
    file_option,
    output_file_option,
    output_options,
    status,
)


@click.command("search")
@config_options(
    "YAML config: its task (training problems), executor, call budget and reward weights.",
    "--set executor.kind=openai",
)
@count_option(
    "--budget",
    "Executor calls to spend (about; the first round runs every candidate once whatever "
    "it costs). A training run's calls: its metrics' executor calls, summed.",
    required=True,
)
@file_option(
    "--candidates",
    "candidates_file",
    "Workflows to search, one per line (# comments). [default: the canonical space a run "
    "with executor.max_calls can write: 1,773 workflows at 12 calls; math tasks]",
)
@count_option("--top", "How many of the best workflows to print.", 10)
@click.option("--seed", default=0, show_default=True, help="Order of the training problems.")
@output_file_option("--out", None, "Write the search as JSON here.")
@output_file_option(
    "--sft-pairs",
    None,
    "Write {question, workflow} pairs of the best workflow here (sft.data: jsonl:PATH).",
)
@count_option(
    "--sft-top",
    "With --sft-pairs: spread the pairs over this many of the best workflows, taken in turn "
    "(a start that writes each of them; RL then chooses between them per problem).",
    1,
)
@click.option(
    "--by",
    "by",
    metavar="KEY",
    multiple=True,
    help="Search once per value of this label of the problems (their meta, e.g. difficulty),"
    " the budget split evenly: a table from label to workflow. Repeat it to label by several"
    " keys (values joined with /). Show the labels to the policy with --set"
    " 'prompt.meta_keys=[KEY]'.",
)
@output_options
def search_cmd(
    config_path, overrides, budget, candidates_file, top, seed, out, sft_pairs, sft_top, by
):
    """Search for the best single workflow: the baseline to try before RL.

    Runs sequential halving (Karnin et al., ICML 2013) over the candidate workflows on the
    config's training problems with its executor (any kind), within about --budget executor
    calls; a workflow's reward is the config's accuracy and cost weights (accuracy alone when
    both are 0). Prints the best workflows with their measured mean reward, a 95% interval and
    the runs behind it. If one workflow is best for every problem, this finds it without
    training; RL is worth more only where the best workflow depends on the problem.

    \b
    Example:
      flowgrpo search --config configs/known-optimum.yaml --budget 1000000 --out search.json
    """
    # heavy: torch (the run environment); `flowgrpo validate` starts without it
    from flowgrpo.trainer.cli.train import check_environment, resolve_config
    from flowgrpo.trainer.search import run

    cfg = resolve_config(config_path, overrides, None, None)
    candidates = _read_candidates(candidates_file) if candidates_file else None
    environment = check_environment(cfg)  # the checks a training run makes, executor probe too
    status(f"searching with executor {cfg.executor.kind!r}, budget {budget:,} calls ...")
    try:
        environment = run.prepare(cfg, environment, seed).environment  # the executor built
        if by:
            _search_by(cfg, budget, by, environment, candidates, seed, top, out, sft_pairs,
                       sft_top, config_path)  # fmt: skip
        else:
            _search_one(cfg, budget, environment, candidates, seed, top, out, sft_pairs,
                        sft_top, config_path)  # fmt: skip
    except (ConfigError, ValueError, FileNotFoundError, OSError, ImportError) as exc:
        fail(str(exc))  # also an --out or --sft-pairs path that cannot be written


def _search_one(cfg, budget, environment, candidates, seed, top, out, pairs, pairs_top,
                config_path) -> None:  # fmt: skip
    from flowgrpo.trainer.search import run

    result = run.search(cfg, budget, candidates=candidates, seed=seed, environment=environment)
    _print(result, top)
    if out:
        _write_json(out, run.result_json(result, config_path, top))
    if pairs:
        chosen = _best(result, pairs_top)
        n = run.sft_pairs(pairs, chosen, environment, cfg.sft.examples)
        click.echo(f"wrote {n} SFT pairs of {len(chosen)} workflow(s) to {pairs} "
                   f"(sft.data: jsonl:{pairs})")  # fmt: skip


def _search_by(cfg, budget, keys, environment, candidates, seed, top, out, pairs, pairs_top,
               config_path) -> None:  # fmt: skip
    from flowgrpo.trainer.search import by_label, run

    results = by_label.search_by(cfg, budget, keys, environment, candidates=candidates, seed=seed)
    key = "/".join(keys)
    for value, result in results.items():
        click.echo(f"\n{key}: {value}")
        _print(result, top)
    if out:
        _write_json(out, {"by": list(keys), "labels": {v: run.result_json(r, config_path, top)
                                                       for v, r in results.items()}})  # fmt: skip
    if pairs:
        chosen = {v: _best(r, pairs_top) for v, r in results.items()}
        n = by_label.sft_pairs_by(pairs, chosen, environment, keys, cfg.sft.examples)
        click.echo(f"wrote {n} SFT pairs, each with its own {key}'s best workflow(s), to {pairs}")
        unseen = [k for k in keys if k not in cfg.prompt.meta_keys]
        if unseen:
            hint = f"--set 'prompt.meta_keys=[{', '.join(keys)}]'"
            click.echo(f"note: the prompt does not show {', '.join(unseen)}; add {hint} to the "
                       "SFT and training runs so the policy can read it")  # fmt: skip


def _best(result, n: int) -> list[str]:
    """The ``n`` best workflows of a search, best first (what ``--sft-top`` takes)."""
    return [arm.workflow for arm in result.arms[:n]]


def _write_json(path: str, data: dict) -> None:
    Path(path).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    click.echo(f"wrote {path}")


def _read_candidates(path: str) -> list[str]:
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"--candidates {path}: {exc}")
    found = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    if not found:
        fail(f"--candidates {path}: no workflow in it (one per line)")
    return list(dict.fromkeys(found))


def _print(result, top: int) -> None:
    click.echo(f"{len(result.arms)} candidates, {len(result.rounds)} rounds, {result.calls:,} "
               f"executor calls (budget {result.budget:,})")  # fmt: skip
    head = f"{'rank':>4}  {'reward':>7}  {'95% CI':>7}  {'runs':>6}  {'calls/run':>9}  workflow"
    click.echo(head)
    for rank, arm in enumerate(result.arms[:top], 1):
        click.echo(f"{rank:>4}  {arm.mean:7.3f}  ±{arm.ci95:6.3f}  {arm.n:>6}  "
                   f"{arm.mean_calls:9.2f}  {arm.workflow}")  # fmt: skip
