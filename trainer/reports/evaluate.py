"""Evaluation of a workflow generator: validity, fallback, execution accuracy (pass@1, pass@k),
diversity, operators, structures and cost on held-out problems.

For the generated ``arithmetic`` task only the ``test`` split is evaluated: it is disjoint from
the training split by construction (each question belongs to one split, by hash; see
``operators.tasks.arithmetic``). File tasks are evaluated on the file given.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from flowgrpo.configuration import check
from flowgrpo.operators.backends.hf import load_hf_model
from flowgrpo.operators.tasks import load_task
from flowgrpo.rewards import prepare_samples

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvalSettings:
    """What to evaluate.

    Attributes:
        task: task spec (arithmetic[:level], gsm8k:PATH, mbpp:PATH, humaneval).
        n: number of problems. k: workflows per problem (greedy when k == 1).
        temperature: sampling temperature when k > 1. max_new_tokens: workflow budget.
        seed: problem selection seed. execute: run the workflows (accuracy).
    """

    task: str = "arithmetic"
    n: int = 20
    k: int = 1
    temperature: float = 0.8
    max_new_tokens: int = 40
    seed: int = 0
    execute: bool = True

    def __post_init__(self):
        check(self.n >= 1, "eval.n", f"must be >= 1 (--n), got {self.n!r}")
        check(self.k >= 1, "eval.k", f"must be >= 1 (--k), got {self.k!r}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al. 2021, arXiv 2107.03374)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def load_for_eval(adapter: str | None, model_name: str):
    """(model, tokenizer, description): the base model, with the adapter of a checkpoint."""
    model, tokenizer = load_hf_model(model_name)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if adapter is None:
        return model, tokenizer, f"{model_name} (base)"
    from peft import PeftModel  # heavy: peft (imports torch); `flowgrpo eval --compare` skips it

    path = Path(adapter)
    path = path / "adapter" if (path / "adapter").is_dir() else path
    if not (path / "adapter_config.json").is_file():
        raise FileNotFoundError(
            f"{adapter}: no adapter here; pass RUN_DIR/checkpoint-N "
            "(it holds adapter/adapter_config.json)"
        )
    return PeftModel.from_pretrained(model, str(path)), tokenizer, f"{model_name} + {path}"


def evaluate(
    model, tokenizer, settings: EvalSettings, executor, limits=None, progress=None
) -> dict:
    """Generate, validate, execute and summarise; returns a JSON-ready dict."""
    # heavy: torch (the rollout generates with the policy); `flowgrpo validate` starts without it
    from flowgrpo.trainer.loop.rollout import generate_rollout

    problems = load_task(settings.task, n=settings.n, seed=settings.seed, split="test")
    start, samples, batch = time.perf_counter(), [], 4
    temperature = 0.0 if settings.k == 1 else settings.temperature
    for i in range(0, len(problems), batch):
        chunk = problems[i : i + batch]
        rollout = generate_rollout(
            model, tokenizer, chunk, settings.k, temperature, 1.0, settings.max_new_tokens
        )
        samples += prepare_samples(
            chunk,
            rollout.texts,
            settings.k,
            llm=executor,
            limits=limits,
            execute=settings.execute and executor is not None,
        )
        if progress is not None:
            progress(len(chunk))
    return summarise(samples, problems, settings, time.perf_counter() - start)


def summarise(samples, problems, settings: EvalSettings, seconds: float) -> dict:
    """The JSON-ready result of scored ``samples`` (k per problem, in problem order)."""
    k, n = settings.k, len(problems)
    valid = [s for s in samples if s.valid]
    correct = [bool(s.execution and s.execution.correct) for s in samples]
    per_problem = [sum(correct[g * k : (g + 1) * k]) for g in range(n)]
    executed = [s.execution for s in samples if s.execution is not None]
    ops = Counter(op for s in valid for op in set(s.report.operators))
    return {
        "task": settings.task,
        "problems": n,
        "k": k,
        "samples": len(samples),
        "validity_rate": len(valid) / len(samples),
        "fallback_rate": sum(s.fallback for s in samples) / len(samples),
        "pass@1": sum(c / k for c in per_problem) / n,
        f"pass@{k}": sum(pass_at_k(k, c, k) for c in per_problem) / n,
        "distinct_workflows": len({s.canonical for s in valid}),
        "top_workflows": Counter(s.canonical for s in valid).most_common(5),
        "operators": {op: c / max(len(valid), 1) for op, c in ops.most_common()},
        "structures": dict(Counter(s.structure for s in valid)),
        "executor_calls_per_problem": sum(e.calls for e in executed) / n,
        "executor_tokens_per_problem": sum(e.tokens for e in executed) / n,
        "unscorable": sum(e.unscorable for e in executed),
        "seconds": seconds,
    }


COMPARE_KEYS = (
    "validity_rate",
    "fallback_rate",
    "pass@1",
    "distinct_workflows",
    "executor_calls_per_problem",
    "executor_tokens_per_problem",
    "seconds",
)


def compare(a: dict, b: dict) -> str:
    """A side-by-side table of two evaluation results."""
    keys = list(COMPARE_KEYS)
    keys += sorted(x for x in set(a) & set(b) if x.startswith("pass@") and x not in keys)
    rows = [
        f"{name}: {r.get('model', '?')} ({r.get('task')}, n={r.get('problems')}, k={r.get('k')})"
        for name, r in (("A", a), ("B", b))
    ]
    rows.append(f"{'metric':30s} {'A':>12s} {'B':>12s} {'B - A':>10s}")
    for key in keys:
        va, vb = a.get(key), b.get(key)
        if isinstance(va, (int, float)) and isinstance(vb, (int, float)):
            rows.append(f"{key:30s} {va:12.3f} {vb:12.3f} {vb - va:+10.3f}")
    return "\n".join(rows)


def format_eval(result: dict) -> str:
    """An evaluation result (from :func:`evaluate`) as console text."""
    lines = [
        f"evaluation of {result.get('model', '?')} on {result['task']}: "
        f"{result['problems']} problems x {result['k']} workflows ({result['seconds']:.0f} s)"
    ]
    for key in (
        "validity_rate",
        "fallback_rate",
        "pass@1",
        f"pass@{result['k']}",
        "distinct_workflows",
        "executor_calls_per_problem",
        "executor_tokens_per_problem",
        "unscorable",
    ):
        value = result[key]
        lines.append(
            f"  {key:30s} {value:.3f}" if isinstance(value, float) else f"  {key:30s} {value}"
        )
    lines.append("  top workflows: " + "; ".join(f"{w} ({c})" for w, c in result["top_workflows"]))
    lines.append("  structures: " + ", ".join(f"{s} {c}" for s, c in result["structures"].items()))
    return "\n".join(lines)
