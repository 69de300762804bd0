"""``flowgrpo search``: the best single workflow for a run's task, executor and reward.

The baseline a user tries before RL: which one workflow, used for every problem, scores best?
:func:`search` runs :func:`.halving.successive_halving` over candidate workflows (default: the
canonical space a run with this call budget can write, :func:`flowgrpo.dsl.space.workflow_space`)
on the run's **training** problems, with the run's executor (any kind: simulated, hf, shared,
openai), its execution cache and the interpreter's batching, exactly as a training step runs
workflows (``rewards.prepare_samples``). A pull's reward is the run's reward restricted to what a
single workflow is paid for: ``rewards.weights.accuracy * accuracy + rewards.weights.cost * cost``
(validity and format are the same for every valid candidate; diversity is about a group, not a
workflow); both weights 0 is accuracy alone, as the simulation's regret reads it.

:func:`sft_pairs` turns the winner into ``{"question", "workflow"}`` pairs for ``sft.data:
jsonl:PATH``: a start that writes the searched workflow.
"""

from __future__ import annotations

import json
import logging
import math
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from flowgrpo.dsl.space import workflow_space
from flowgrpo.operators.executor import executor_limits
from flowgrpo.operators.interpreter import run_workflows
from flowgrpo.operators.tasks.base import Problem
from flowgrpo.rewards.sample import make_sample
from flowgrpo.rewards.score import prepare_samples, score_samples
from flowgrpo.rewards.spec import RewardSpec
from flowgrpo.trainer.config import TrainConfig
from flowgrpo.trainer.loop.environment import RunEnvironment, build_environment
from flowgrpo.trainer.search.halving import SearchResult, successive_halving

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SearchSetup:
    """What the pulls run with: the built run environment (executor included), the reward
    restricted to a workflow's own components, and the problems in the order they are drawn."""

    environment: RunEnvironment
    spec: RewardSpec
    order: tuple[int, ...]


def candidates_of(config: TrainConfig, environment: RunEnvironment) -> tuple[str, ...]:
    """The default candidates: the canonical space's workflows within the run's call budget
    (its static limits: an operator's votes and retries counted). A ``ValueError`` for
    problems that are not math (the space is a math space)."""
    domains = {p.domain for p in environment.problems}
    if domains - {"math"}:
        raise ValueError(
            f"the built-in workflow space is for math problems; this task has {sorted(domains)}:"
            " give your own candidates (one workflow per line)"
        )
    limits = environment.limits or executor_limits(config.executor)
    return workflow_space(limits=limits.static_limits())


def search(
    config: TrainConfig,
    budget: int,
    *,
    candidates: Sequence[str] | None = None,
    seed: int = 0,
    environment: RunEnvironment | None = None,
) -> SearchResult:
    """The best single workflow of ``candidates`` for ``config``'s task, executor and reward,
    within about ``budget`` executor calls (:mod:`.halving`). ``environment``: the run
    environment with its executor built (default: built here; the ``shared`` executor loads the
    run's model). Candidates that are not valid for the run are refused by name."""
    setup = prepare(config, environment, seed)
    env = setup.environment
    texts = tuple(candidates) if candidates is not None else candidates_of(config, env)
    _check_candidates(texts, env)
    cursor = [0]

    def pull(workflows: Sequence[str], pulls: int):
        problems, repeats = _draw(setup, cursor, pulls)
        return _pull(setup, workflows, problems, repeats)

    return successive_halving(list(texts), pull, budget, seed)


def prepare(config: TrainConfig, environment: RunEnvironment | None, seed: int) -> SearchSetup:
    """The environment with its executor (built as the Trainer builds it), the reward, and a
    seeded order of the training problems."""
    if environment is None or environment.executor is None:
        # heavy: torch (the shared executor runs on the policy's base model)
        from flowgrpo.trainer.loop import setup

        environment = environment or build_environment(config, with_executor=False)
        model, tokenizer = _shared_model(config)
        llm, limits = setup.executor(config, model, tokenizer)
        environment = environment.with_executor(llm, limits)
    if not environment.problems:
        raise ValueError(f"rollout.task {config.rollout.task!r} gave no training problems")
    order = list(range(len(environment.problems)))
    random.Random(seed).shuffle(order)
    return SearchSetup(environment, config.rewards.for_one_workflow(), tuple(order))


def _shared_model(config: TrainConfig):
    """(model, tokenizer) for the ``shared`` executor (the run's base model), else (None, None)."""
    if config.executor.kind != "shared":
        return None, None
    # heavy: torch and transformers
    from flowgrpo.operators.models import load_model

    m = config.model
    return load_model(m.name_or_path, gguf_file=m.gguf_file, dtype=m.dtype, seed=config.optim.seed)


def _check_candidates(texts: Sequence[str], environment: RunEnvironment) -> None:
    """Every candidate must be a workflow the run accepts (its operators, domain, budget)."""
    problem = environment.problems[0]
    for text in texts:
        sample = make_sample(problem, text, operators=environment.operators,
                             limits=environment.limits)  # fmt: skip
        if not sample.valid:
            codes = [e.code for e in sample.report.errors] if sample.report else ["no workflow"]
            raise ValueError(f"candidate {text!r} is not a valid workflow for this run "
                             f"({', '.join(codes)})")  # fmt: skip


def _draw(setup: SearchSetup, cursor: list[int], pulls: int) -> tuple[list, list[int]]:
    """The next ``pulls`` problems of the seeded order and their repeat indices (without
    replacement until it wraps; a wrapped problem runs as its next repeat, a fresh draw of an
    executor that samples)."""
    problems, repeats = [], []
    n = len(setup.order)
    for _ in range(pulls):
        index = cursor[0]
        problems.append(setup.environment.problems[setup.order[index % n]])
        repeats.append(index // n)
        cursor[0] += 1
    return problems, repeats


def _pull(setup: SearchSetup, workflows, problems, repeats):
    """Every workflow on every problem in one batched run (``run_workflows``, as a training
    step runs them), each pair at its problem's repeat index; per workflow (reward, calls).
    No execution cache: a (workflow, problem, repeat) never runs twice in one search."""
    env = setup.environment
    samples = prepare_samples(
        [p for p in problems for _ in workflows], list(workflows) * len(problems), 1,
        limits=env.limits, operators=env.operators, execute=False,
    )  # fmt: skip
    pairs = [(s.canonical, s.problem) for s in samples]
    runs = run_workflows(pairs, env.executor, env.limits, operators=env.operators,
                         repeats=[r for r in repeats for _ in workflows])  # fmt: skip
    executed = [replace(s, execution=run) for s, run in zip(samples, runs)]
    totals = score_samples(executed, 1, setup.spec).total()
    rows: list[list[tuple[float | None, int]]] = [[] for _ in workflows]
    for i, (total, run) in enumerate(zip(totals, runs)):
        reward = None if math.isnan(total) else float(total)
        rows[i % len(workflows)].append((reward, run.calls))
    return rows


def result_json(result: SearchResult, config_path: str | None, top: int) -> dict:
    """The search as plain data: budget, calls, rounds, and the ``top`` arms best first."""
    return {
        "config": config_path,
        "budget_calls": result.budget,
        "calls": result.calls,
        "candidates": len(result.arms),
        "rounds": [vars(r) for r in result.rounds],
        "top": [_arm_json(a) for a in result.arms[:top]],
    }


def _arm_json(arm) -> dict:
    return {
        "workflow": arm.workflow,
        "reward": arm.mean,
        "ci95": arm.ci95,
        "n": arm.n,
        "calls_per_run": arm.mean_calls,
        "last_round": arm.last_round,
    }


def sft_pairs(
    path: str | Path, workflows: Sequence[str], environment: RunEnvironment, n: int
) -> int:
    """Write ``n`` (at most the training problems) ``{"question", "workflow"}`` pairs to ``path``
    (``sft.data: jsonl:PATH``): problem i gets ``workflows[i % len(workflows)]``, so a start
    trained on them writes each of the searched workflows about equally often, whatever the
    problem (the choice between them is left to RL). A prompt with ``meta_keys`` gets those
    labels in each pair's ``meta`` (only those: the start sees what the run's prompt shows).
    Returns how many."""
    if not workflows:
        raise ValueError("sft_pairs needs at least one workflow")
    return write_pairs(path, environment, n, {"": workflows}, lambda problem: "")


def write_pairs(
    path: str | Path,
    environment: RunEnvironment,
    n: int,
    chosen: Mapping[str, Sequence[str]],
    label: Callable[[Problem], str],
) -> int:
    """Write the first ``n`` training problems as pairs to ``path``, each with one of the
    workflows ``chosen`` for its ``label``, taken in turn within the label, and the labels the
    run's prompt shows (``meta``). Returns how many."""
    problems, shown = environment.problems[:n], environment.prompt.spec.meta_keys
    used: Counter[str] = Counter()
    lines = []
    for problem in problems:
        value = label(problem)
        workflows = chosen[value]
        row = {"question": problem.question, "domain": problem.domain,
               "workflow": workflows[used[value] % len(workflows)]}  # fmt: skip
        used[value] += 1
        if shown:
            row["meta"] = {key: problem.meta[key] for key in shown}
        lines.append(json.dumps(row))
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)


__all__ = ["SearchSetup", "candidates_of", "prepare", "result_json", "search", "sft_pairs",
           "write_pairs"]  # fmt: skip
