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

from flowgrpo.configuration import check, check_types
from flowgrpo.metrics_hooks import METRICS_HOOKS
from flowgrpo.operators import models
from flowgrpo.operators.tasks import load_task
from flowgrpo.rewards import prepare_samples
from flowgrpo.trainer.loop.metric_hooks import sample_hook_metrics

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvalSettings:
    """What to evaluate.

    Attributes:
        task: task spec (arithmetic[:level], gsm8k:PATH, mbpp:PATH, humaneval).
        n: number of problems. k: workflows per problem (greedy when k == 1).
        temperature / top_p: sampling when k > 1. max_new_tokens: workflow budget.
        seed: problem selection seed. execute: run the workflows (accuracy).
        constrained: off or grammar: sample only what the workflow grammar of the problem's
            domain accepts (``rollout.constrained``, docs/CONSTRAINED.md).
        batch: problems sampled in one ``generate`` call (batch x k rows at once). A decoding
            step reads every weight once whatever the rows, so larger batches cost less per row
            (SmolLM2-135M, 2 CPU cores: 126 ms a step for 16 rows, 301 ms for 64; one-off
            timing in docs/BENCHMARKS.md); the distribution sampled does not depend on it,
            only which random draws each row gets.
        packed_weights: sample on oneDNN-packed Linear weights on a CPU
            (``rollout.packed_weights``).

    A checkpoint is evaluated as trained: :func:`settings_of_run` takes max_new_tokens,
    temperature, top_p and constrained from its run's config.yaml.
    """

    task: str = "arithmetic"
    n: int = 20
    k: int = 1
    temperature: float = 0.8
    top_p: float = 1.0
    max_new_tokens: int = 40
    seed: int = 0
    execute: bool = True
    constrained: str = "off"
    batch: int = 16
    packed_weights: bool = True

    def __post_init__(self):
        check_types(self, "eval.")
        check(self.n >= 1, "eval.n", f"must be >= 1 (--n), got {self.n!r}")
        check(self.k >= 1, "eval.k", f"must be >= 1 (--k), got {self.k!r}")
        check(self.temperature > 0, "eval.temperature", "must be > 0 (--temperature)")
        check(0 < self.top_p <= 1, "eval.top_p", "must be in (0, 1]")
        check(self.max_new_tokens >= 1, "eval.max_new_tokens", "must be >= 1 (--max-new-tokens)")
        check(self.constrained in ("off", "grammar"), "eval.constrained", "use off or grammar")
        check(
            self.batch >= 1,
            "eval.batch",
            f"must be >= 1 problem per generate call, got {self.batch!r}",
        )


def settings_of_run(
    run_config=None, max_new_tokens=None, temperature=None, constrained=None, **kwargs
):
    """EvalSettings whose workflow budget (max_new_tokens) and sampling (temperature, top_p,
    constrained, packed_weights) are the run's (``run_config``: its TrainConfig, or None for the
    defaults) unless given."""
    source = getattr(run_config, "rollout", None) or EvalSettings()
    kwargs.setdefault("packed_weights", source.packed_weights)
    given = {"max_new_tokens": max_new_tokens, "temperature": temperature,
             "constrained": constrained}  # fmt: skip
    # a value given is checked as given: 0 or "" is refused by EvalSettings, not replaced
    chosen = {k: getattr(source, k) if v is None else v for k, v in given.items()}
    return EvalSettings(top_p=source.top_p, **chosen, **kwargs)


@dataclass(frozen=True)
class ModelSpec:
    """The base model to load for evaluation or export.

    Attributes:
        name_or_path: 'default' (embedded SmolLM2-135M GGUF), 'tiny-random', a path or hub id.
        gguf_file: GGUF file inside ``name_or_path`` (GGUF checkpoints only).
        dtype: float32, bfloat16 or float16.
        seed: the weights seed of tiny-random (a run's optim.seed); unused for other models.
    """

    name_or_path: str = "default"
    gguf_file: str | None = None
    dtype: str = "float32"
    seed: int = 0

    @classmethod
    def of_run(cls, run_config=None, model: str | None = None, dtype: str | None = None):
        """The run's model (name, gguf_file, dtype, seed) with ``model``/``dtype`` overrides; a
        different ``model`` drops the run's gguf_file. No run: ``model`` or 'default'."""
        if run_config is None:  # an empty name is refused by the model loader, not replaced
            name = "default" if model is None else model
            return cls(name, None, "float32" if dtype is None else dtype)
        m = run_config.model
        same = model is None or model == m.name_or_path
        return cls(
            m.name_or_path if same else model,
            m.gguf_file if same else None,
            m.dtype if dtype is None else dtype,
            run_config.optim.seed,
        )


def load_base_model(spec: ModelSpec, device: str = "cpu"):
    """(model in eval mode on ``device``, tokenizer) of ``spec``, loaded by THE loader
    (looked up when called: a test that wraps ``flowgrpo.operators.models.load_model`` sees it)."""
    return models.load_model(  # tiny-random: the run's random weights, seeded by its optim.seed
        spec.name_or_path, gguf_file=spec.gguf_file, dtype=spec.dtype, device=device, seed=spec.seed
    )


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al. 2021, arXiv 2107.03374)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def checkpoint_adapter(checkpoint: str | Path) -> Path:
    """The adapter folder of ``RUN_DIR/checkpoint-N`` (or the adapter folder itself);
    ``FileNotFoundError`` naming what to pass when there is none."""
    # the run folder's layout imports the config schema; `flowgrpo validate` starts without it
    from flowgrpo.trainer.loop.rundir import adapter_folder

    path = adapter_folder(checkpoint)
    if path is None:
        raise FileNotFoundError(
            f"{checkpoint}: no adapter here; pass RUN_DIR/checkpoint-N "
            "(it holds adapter/adapter_config.json)"
        )
    # heavy: peft and safetensors (import torch); `flowgrpo eval --compare` never gets here
    from flowgrpo.trainer.loop.init_adapter import check_adapter_files

    return check_adapter_files(path)


def evaluate(
    model,
    tokenizer,
    settings: EvalSettings,
    executor,
    limits=None,
    progress=None,
    hooks=(),
    prompt=None,
    pick=None,
) -> dict:
    """Generate, validate, execute and summarise; returns a JSON-ready dict. ``pick``: a
    ``problem -> workflow`` that writes the workflows instead of the model (a search's table,
    ``flowgrpo eval --search``), scored the same way. ``hooks``: the
    plugins' metrics hooks on for this evaluation (``loop.metric_hooks.start_hooks`` of the
    run's config) add their metrics of the workflows written, as in training.
    ``prompt``: the :class:`~..loop.prompt.PolicyPrompt` (prompt and operator table) of the
    run evaluated; None: the built-in prompt and the process-wide table.

    Sampling (k > 1) starts from torch's RNG seeded with ``settings.seed``, on a fork of the
    caller's RNG state: the same model and settings give the same result whatever ran before
    (every checkpoint of ``flowgrpo eval RUN_DIR --all`` as its own ``flowgrpo eval``)."""
    # heavy: torch (the rollout generates with the policy); `flowgrpo validate` starts without it
    import torch

    with torch.random.fork_rng():
        torch.manual_seed(settings.seed)
        if pick is not None:
            write = pick_writer(pick, settings.k)
        else:
            write = _policy_writer(model, tokenizer, settings, limits, prompt)
        return _evaluate(write, settings, executor, limits, progress, hooks, prompt)


def pick_writer(pick, k: int):
    """The texts of a chunk of problems written by ``pick``: its workflow ``k`` times each."""
    return lambda chunk: [pick(p) for p in chunk for _ in range(k)]


def _policy_writer(model, tokenizer, settings, limits, prompt):
    """The texts of a chunk of problems sampled from the model (greedy when k = 1)."""
    # heavy: torch (the rollout generates with the policy); `flowgrpo validate` starts without it
    from flowgrpo.trainer.loop.constrain import sampling_limits
    from flowgrpo.trainer.loop.rollout import generate_rollout
    from flowgrpo.trainer.loop.sampling_cache import SamplingCache

    temperature = 0.0 if settings.k == 1 else settings.temperature
    reuse = SamplingCache()  # the chunks share the frozen layers' packed weights and the prefix

    def write(chunk):
        # constrained: within the executor's call budget, as in training
        return generate_rollout(
            model, tokenizer, chunk, settings.k, temperature, settings.top_p,
            settings.max_new_tokens, prompt=prompt, constrained=settings.constrained,
            limits=sampling_limits(limits), packed=settings.packed_weights, reuse=reuse,
        ).texts  # fmt: skip

    return write


def _evaluate(write, settings, executor, limits, progress, hooks, prompt) -> dict:
    problems = load_task(settings.task, n=settings.n, seed=settings.seed, split="test")
    start, samples, batch = time.perf_counter(), [], settings.batch
    for i in range(0, len(problems), batch):
        chunk = problems[i : i + batch]
        samples += prepare_samples(
            chunk,
            write(chunk),
            settings.k,
            llm=executor,
            limits=limits,
            execute=settings.execute and executor is not None,
            operators=prompt.operators if prompt is not None else None,
        )
        if progress is not None:
            progress(len(chunk))
    result = summarise(samples, problems, settings, time.perf_counter() - start)
    result.update(sample_hook_metrics(hooks, samples, problems, settings.k))
    return result


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
        # per sample (k per problem, in problem order): its valid workflow or None; studies
        # score each one against the problem it answered
        "sample_workflows": [s.canonical if s.valid else None for s in samples],
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


def headline_keys() -> list[str]:
    """The keys the registered metrics hooks name as their headline (``MetricsHook.headline``,
    e.g. the simulation's ``sim/expected_accuracy``), in registration-name order."""
    return [key for name in METRICS_HOOKS.names() for key in METRICS_HOOKS.get(name).headline]


def compare_keys(*results: dict) -> list[str]:
    """The metrics a comparison or table shows: :data:`COMPARE_KEYS`, the hooks' headline keys
    and the plugins' prefixed keys (``prefix/name``) that every result has, and pass@k."""
    shared = set.intersection(*(set(r) for r in results)) if results else set()
    keys = [*COMPARE_KEYS[:-1], *headline_keys()]
    keys += sorted(x for x in shared if "/" in x and x not in keys)
    keys += sorted(x for x in shared if x.startswith("pass@") and x not in keys)
    return list(dict.fromkeys([*keys, COMPARE_KEYS[-1]]))


def compare(a: dict, b: dict) -> str:
    """A side-by-side table of two evaluation results."""
    keys = compare_keys(a, b)
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
    keys = ("validity_rate", "fallback_rate", "pass@1", f"pass@{result['k']}")
    for key in (
        *dict.fromkeys(keys),  # k = 1: pass@1 once
        "distinct_workflows",
        "executor_calls_per_problem",
        "executor_tokens_per_problem",
        "unscorable",
    ):
        value = result[key]
        lines.append(
            f"  {key:30s} {value:.3f}" if isinstance(value, float) else f"  {key:30s} {value}"
        )
    if result.get("executor"):  # a metrics hook's note on what its numbers are
        lines.insert(1, f"  executor: {result['executor']}")
    for name in METRICS_HOOKS.names():  # plugins' metrics (flowgrpo.metrics_hooks)
        report = METRICS_HOOKS.get(name).report
        lines += report(result) if report is not None else []
    lines.append("  top workflows: " + "; ".join(f"{w} ({c})" for w, c in result["top_workflows"]))
    lines.append("  structures: " + ", ".join(f"{s} {c}" for s, c in result["structures"].items()))
    return "\n".join(lines)
