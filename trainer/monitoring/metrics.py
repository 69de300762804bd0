"""Per-step metrics: computed from the rollout, the reward table and the update; written as
one JSON object per optimizer step to ``metrics.jsonl`` (flushed every step), optionally to
TensorBoard, and summarised on one console line.
"""

from __future__ import annotations

import json
import logging
import math
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from flowgrpo.files import replace_text
from flowgrpo.metrics_hooks import METRICS_HOOKS

logger = logging.getLogger(__name__)


def reward_z_frac_extreme(combined_N: np.ndarray, group_size: int) -> float:
    """Share of samples whose within-group reward z-score (population std) has |z| >= 0.99.

    The K=2 signature, whatever the estimator: with two different rewards both z-scores are
    exactly ±1 however small the gap. (``adv_frac_extreme`` reads the advantages themselves; with
    the unbiased std that grpo uses, K=2 gives ±0.707 and would not show it.)
    """
    z_hits = 0
    groups = np.asarray(combined_N, dtype=np.float64).reshape(-1, group_size)
    for row in groups:
        ok = row[np.isfinite(row)]
        if ok.size >= 2 and ok.max() > ok.min():
            z_hits += int((np.abs((ok - ok.mean()) / ok.std()) >= 0.99).sum())
    return z_hits / max(groups.size, 1)


def rollout_metrics(table, rollout, adv_N, group_stats: dict) -> dict:
    """Reward, shape and DSL metrics of one rollout (before the update it feeds).

    ``adv_N``: the advantages of the batch that is trained (None when nothing is trained: the
    advantage metrics are then None).
    """
    details = table.details
    n = len(details)
    combined = group_stats["combined"]
    finite = combined[np.isfinite(combined)]
    lengths = rollout.lengths_N.float()
    out = {
        "reward": float(finite.mean()) if finite.size else math.nan,
        "reward_std": float(group_stats["reward_std"]),
        "frac_reward_zero_std": float(group_stats["frac_zero_std"]),
        "fallback_rate": sum(d["fallback"] for d in details) / n,
        "validity_rate": sum(d["valid"] for d in details) / n,
        "accuracy": sum(bool(d.get("correct")) for d in details) / n,
        "unscorable_rate": sum(bool(d.get("unscorable")) for d in details) / n,
        "distinct_workflows": len({d["canonical"] for d in details if d["canonical"]}),
        "num_completions": n,
        "adv_frac_extreme": None if adv_N is None else float((adv_N.abs() >= 0.99).float().mean()),
        "reward_z_frac_extreme": reward_z_frac_extreme(combined, table.group_size),
        "group_size": table.group_size,
        "adv_abs_mean": None if adv_N is None else float(adv_N.abs().mean()),
        "completions/mean_length": float(lengths.mean()),
        "completions/min_length": float(lengths.min()),
        "completions/max_length": float(lengths.max()),
        "completions/truncated_rate": float(rollout.truncated_N.float().mean()),
    }
    out.update(constraint_metrics(rollout, details))
    for j, name in enumerate(table.names):
        col = table.scores[:, j]
        ok = col[np.isfinite(col)]
        out[f"rewards/{name}/mean"] = float(ok.mean()) if ok.size else math.nan
        out[f"rewards/{name}/std"] = float(ok.std()) if ok.size else math.nan
    valid = [d for d in details if d["valid"]]
    ops = Counter(op for d in valid for op in set(d.get("operators") or ()))
    out["operators"] = {op: c / max(len(valid), 1) for op, c in sorted(ops.items())}
    out["structures"] = dict(Counter(d["structure"] for d in valid if d["structure"]))
    return out


def constraint_metrics(rollout, details) -> dict:
    """What ``rollout.constrained: grammar`` did (all None for a free rollout): the share of
    sampled positions where the mask removed probability mass (> 1e-6), the mean mass removed
    per position, the fallback rate flagged as 0 by construction (the policy did not learn it),
    the share of finished completions that still fail ``validate`` (expected 0), and the share
    of completions the end game narrowed or forced (``trainer/loop/endgame.py``)."""
    removed_NT = getattr(rollout, "removed_mass_NT", None)
    if removed_NT is None:
        return {key: None for key in CONSTRAINT_KEYS}
    mask_NT = rollout.mask_NT.bool()
    removed = removed_NT[mask_NT]
    finished = [d for d, t in zip(details, rollout.truncated_N.tolist(), strict=True) if not t]
    return {
        "constrained/masked_token_frac": float((removed > 1e-6).float().mean()),
        "constrained/removed_mass": float(removed.mean()),
        "constrained/fallback_by_construction": True,
        "constrained/invalid_finished_rate": (
            sum(not d["valid"] for d in finished) / len(finished) if finished else None
        ),
        "constrained/endgame_rate": _share(getattr(rollout, "endgame_N", None)),
    }


def _share(flags_N) -> float | None:
    return None if flags_N is None or len(flags_N) == 0 else float(flags_N.float().mean())


CONSTRAINT_KEYS = (
    "constrained/masked_token_frac",
    "constrained/removed_mass",
    "constrained/fallback_by_construction",
    "constrained/invalid_finished_rate",
    "constrained/endgame_rate",
)


#: Every key of a metrics.jsonl line, with its meaning (docs/METRICS.md is generated from this
#: table and a test checks it). Keys ``rewards/<component>/mean|std`` are added per configured
#: reward component. Nested values stay under their own keys: operators, structures, alerts,
#: collapse. A value that was not computed on a step is null (None), never missing.
METRICS_SCHEMA: tuple[tuple[str, str], ...] = (
    ("step", "optimizer step (1-based)"),
    ("reward", "mean combined reward of the step's first rollout (scorable samples)"),
    ("reward_std", "mean within-group std of the combined reward"),
    ("frac_reward_zero_std", "share of groups whose rewards are all equal (no signal)"),
    ("fallback_rate", "share of completions with no workflow found"),
    ("validity_rate", "share of completions with a valid workflow"),
    ("accuracy", "share of completions whose workflow answered correctly"),
    ("unscorable_rate", "share of completions the executor could not score (NaN reward)"),
    ("distinct_workflows", "distinct canonical workflows in the rollout"),
    ("num_completions", "completions in the step's first rollout (B * K)"),
    ("group_size", "K, completions per problem"),
    ("adv_frac_extreme", "share of trained advantages with |A| >= 0.99"),
    ("reward_z_frac_extreme", "share of samples with within-group reward |z| >= 0.99 (K=2 sign)"),
    ("adv_abs_mean", "mean |A| of the trained batch"),
    ("completions/mean_length", "mean completion length (tokens)"),
    ("completions/min_length", "shortest completion (tokens)"),
    ("completions/max_length", "longest completion (tokens)"),
    ("completions/truncated_rate", "share of completions that hit max_new_tokens"),
    (
        "constrained/masked_token_frac",
        "rollout.constrained=grammar only: share of sampled positions where the grammar mask "
        "removed probability mass",
    ),
    (
        "constrained/removed_mass",
        "rollout.constrained=grammar only: mean probability mass the mask removed per sampled "
        "position (tempered distribution)",
    ),
    (
        "constrained/fallback_by_construction",
        "true under rollout.constrained=grammar: fallback_rate is 0 by construction, not learned",
    ),
    (
        "constrained/invalid_finished_rate",
        "rollout.constrained=grammar only: share of finished completions that still fail "
        "validate (expected 0: the end game keeps the call budget the grammar does not encode)",
    ),
    (
        "constrained/endgame_rate",
        "rollout.constrained=grammar only: share of completions whose mask the end game "
        "narrowed or forced to finish inside max_new_tokens and the call budget",
    ),
    ("kept_groups", "groups trained on after dynamic sampling"),
    ("resampled_groups", "groups of fresh problems sampled to replace zero-signal ones"),
    (
        "resample_temperature",
        "rollout.tie_temperature on: the temperature of this step's replacement rounds, sampled "
        "because every group of the first rollout tied; null when the step did not tie",
    ),
    ("gen_time", "seconds generating completions"),
    ("score_time", "seconds extracting, validating, executing and scoring"),
    ("loss", "the step's total loss (sum over micro-batches = whole-batch loss)"),
    ("loss/policy", "the policy-loss part of the total"),
    ("grad_norm", "LoRA gradient norm before clipping"),
    ("lr", "learning rate after the step"),
    ("entropy", "mean token entropy at the sampling temperature (nats)"),
    (
        "entropy_coef",
        "algorithm.entropy_control on: the entropy coefficient the loss used (0: "
        "none applied this step); null when off",
    ),
    ("kl", "mean k3 KL to the reference (null when beta = 0: not computed)"),
    ("clip_ratio/low", "share of tokens clipped at 1 - eps_low"),
    ("clip_ratio/high", "share of tokens clipped at 1 + eps_high"),
    ("ratio_mean", "mean importance ratio"),
    ("frac_pg_tokens", "share of valid tokens that get policy gradient"),
    ("cov_logp_adv", "Cov(log pi, A) over the step's valid tokens (arXiv 2505.22617)"),
    (
        "sampler_logp_gap",
        "mean |log pi_old - log pi_sampler| over the trained completion tokens: how far the "
        "sampling policy (merged or bf16 weights) was from the one the update scores; null "
        "without sampled log-probs",
    ),
    ("seq_ratio_mean", "gspo: token-weighted mean sequence ratio"),
    ("clip_cov/frac_selected", "clip_cov: share of tokens detached"),
    ("kl_cov/frac_selected", "kl_cov: share of tokens penalised"),
    ("kl_cov/abs_kl_mean", "kl_cov: mean |logp - old_logp|"),
    ("optimizer_steps", "optimizer steps taken this step (mu when all finite)"),
    ("nonfinite_skips", "optimizer steps skipped for a non-finite loss or gradient"),
    ("skipped_update", "true when this step did not update the policy"),
    ("rollback", "true when the guard undid the previous update"),
    ("collapse", "the update -> collapse event seen at this step (object) or null"),
    ("step_time", "seconds for the whole step"),
    ("tokens_per_s", "completion tokens generated per second of step time"),
    ("cache_hit_rate", "execution cache hit rate so far"),
    (
        "executor_calls",
        "executor LLM calls this step made (first rollout, resampled groups, every execution; "
        "cache hits excluded): a run's sum is what `flowgrpo search --budget` compares with",
    ),
    ("operators", "share of valid workflows using each operator (object)"),
    ("structures", "count of valid workflows per structure class (object)"),
    ("alerts", "health alerts fired at this step (list of objects)"),
)
METRICS_KEYS = tuple(key for key, _ in METRICS_SCHEMA)


def metrics_table(hooks: Iterable[tuple[str, Any]] = ()) -> str:
    """The Markdown table of :data:`METRICS_SCHEMA`, then the keys of the metrics ``hooks``
    (``(name, MetricsHook)`` pairs: a plugin's keys, written only in runs where its hook is on).
    docs/METRICS.md holds it for the built-in plugins; a test checks that the file matches, so
    the documentation cannot drift from the code."""
    rows = ["| key | meaning |", "|---|---|"]
    rows += [f"| `{key}` | {meaning} |" for key, meaning in METRICS_SCHEMA]
    rows.append("| `rewards/<component>/mean`, `rewards/<component>/std` | per reward component |")
    for name, hook in hooks:
        meanings = getattr(hook, "meanings", {})
        rows += [
            f"| `{key}` | plugin hook `{name}`, only in runs where it is on: "
            f"{meanings.get(key, '')} |"
            for key in hook.keys
        ]
    return "\n".join(rows) + "\n"


def complete_metrics(metrics: dict) -> dict:
    """The line with every schema key (None where not computed), schema keys first."""
    out = {key: metrics.get(key) for key in METRICS_KEYS}
    out.update((k, v) for k, v in metrics.items() if k not in out)
    return out


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN; null means "not available"
    return value


class MetricsWriter:
    """Appends metrics and samples as JSONL, flushing after each step; every metrics line also
    goes to the run's experiment trackers (``logging.report_to``; see :mod:`.trackers`)."""

    def __init__(self, run_dir: str | Path, trackers=None):
        self.run_dir = Path(run_dir)
        self.metrics = open(self.run_dir / "metrics.jsonl", "a", encoding="utf-8")  # noqa: SIM115
        self.samples = open(self.run_dir / "samples.jsonl", "a", encoding="utf-8")  # noqa: SIM115
        self.trackers = trackers  # .log(metrics) each step, .close() at the end; or None

    def write(self, metrics: dict, samples: list[dict]) -> None:
        """Append one step; :class:`RunFileError` naming the file when it cannot be written
        (a full disk): checkpoints are written separately, so the last one stays intact."""
        clean = {k: _finite(v) for k, v in metrics.items()}
        try:
            self.metrics.write(json.dumps(clean) + "\n")
            self.metrics.flush()
        except OSError as exc:
            raise RunFileError(self.run_dir / "metrics.jsonl", exc) from None
        try:
            for row in samples:
                self.samples.write(json.dumps(row, default=str) + "\n")
            self.samples.flush()
        except OSError as exc:
            raise RunFileError(self.run_dir / "samples.jsonl", exc) from None
        if self.trackers is not None:
            self.trackers.log(metrics)

    def close(self) -> None:
        for handle in (self.metrics, self.samples):
            try:
                handle.close()
            except OSError:  # a full disk: the buffered tail is lost, the run resumes anyway
                logger.warning("could not flush %s on close", handle.name)
        if self.trackers is not None:
            self.trackers.close()


class RunFileError(OSError):
    """A run file (metrics.jsonl, samples.jsonl) could not be written; ``path`` names it."""

    def __init__(self, path: Path, cause: OSError) -> None:
        super().__init__(
            f"could not write {path}: {type(cause).__name__}: {cause}. The checkpoints are "
            "written separately and the last one is intact; free space, then resume with "
            "--resume (the lines written after that checkpoint are dropped)"
        )
        self.path = path


def truncate_jsonl(path: Path, max_step: int) -> None:
    """Drop rows with step > max_step (written after the checkpoint a run resumes from)."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            if json.loads(line).get("step", 0) <= max_step:
                kept.append(line)
        except ValueError:
            continue  # torn line of a killed run
    replace_text(path, "".join(f"{line}\n" for line in kept))  # a kill keeps the old rows


def console_line(m: dict) -> str:
    """One-line step summary."""

    def f(key, fmt="{:.3f}"):
        v = m.get(key)
        return (
            "n/a" if v is None or (isinstance(v, float) and not math.isfinite(v)) else fmt.format(v)
        )

    return (
        f"step {m['step']:>4} | reward {f('reward')} ± {f('reward_std')} | valid "
        f"{f('validity_rate', '{:.2f}')} fallback {f('fallback_rate', '{:.2f}')} acc "
        f"{f('accuracy', '{:.2f}')} | zero-std {f('frac_reward_zero_std', '{:.2f}')} | "
        f"H {f('entropy')} | loss {f('loss', '{:.4f}')} gn {f('grad_norm')} | "
        f"{f('step_time', '{:.1f}')}s"
    ) + "".join(  # plugins' metrics hooks add their part (flowgrpo.metrics_hooks)
        hook.console(m) for hook in map(METRICS_HOOKS.get, METRICS_HOOKS.names()) if hook.console
    )


class StepPrinter:
    """A run's ``on_step`` for the front ends (``flowgrpo train``, ``flowgrpo.train``): each
    step's :func:`console_line` (through tqdm, so ``bar`` stays below the lines) when ``lines``,
    one tick of ``bar`` (a tqdm bar, possibly disabled), then the caller's own ``on_step``.
    Closes the bar on leaving a ``with`` block."""

    def __init__(self, bar, lines: bool, on_step=None) -> None:
        self.bar, self.lines, self.on_step = bar, lines, on_step

    def __call__(self, metrics: dict) -> None:
        if self.lines:
            self.bar.write(console_line(metrics))
        self.bar.update(1)
        if self.on_step is not None:
            self.on_step(metrics)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.bar.close()
