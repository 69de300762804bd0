"""The built-in health checks (see :mod:`.health` for the table), registered on import.

Each one reads the newest line of the history (and, for streaks, the lines before it) and
returns an :class:`~.alerts.Alert` or None. A value that is missing, None or NaN makes a check
unable to decide: it does not fire, and it breaks a streak of consecutive steps. Torch-free;
no I/O. Imported by :mod:`.health`, so every built-in check is registered whenever the monitor
or :class:`~.health_config.HealthConfig` is imported from there.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence

from flowgrpo.configuration import whole_number
from flowgrpo.trainer.monitoring.alerts import Alert, register_check
from flowgrpo.trainer.monitoring.collapse import collapse_at
from flowgrpo.trainer.monitoring.health_config import HealthConfig

_ZERO = 1e-12  # |x| at or below this counts as exactly zero (loss, grad_norm)


def _num(line: Mapping, key: str) -> float | None:
    value = line.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def _step(history: Sequence[Mapping], index: int = -1) -> int:
    index = index % len(history)
    step = history[index].get("step")
    return step if whole_number(step) else index


def _tail(history: Sequence[Mapping], n: int) -> list[Mapping] | None:  # None: fewer lines
    size = len(history)
    return None if size < n else [history[i] for i in range(size - n, size)]


def _streak_since(history: Sequence[Mapping], n: int, ok: Callable[[Mapping], bool]) -> int | None:
    """The step at which the run of lines where ``ok`` holds began, when it holds for the last
    ``n`` lines (at least); None otherwise."""
    size = len(history)
    if size < n or not all(ok(history[i]) for i in range(size - n, size)):
        return None
    i = size - 1
    while i > 0 and ok(history[i - 1]):
        i -= 1
    return _step(history, i)


# --------------------------------------------------------------------------- the checks


@register_check("entropy_low", keys=("entropy",), summary="entropy < entropy_min")
def check_entropy_low(history: Sequence[Mapping], config: HealthConfig) -> Alert | None:
    """Entropy collapse: the policy stopped exploring (2.5 -> 0.006 in a few steps was seen)."""
    entropy = _num(history[-1], "entropy")
    if entropy is None or not entropy < config.entropy_min:
        return None
    return Alert(
        "entropy_low",
        _step(history),
        f"entropy {entropy:.4g} is below {config.entropy_min:g}: the policy is close to "
        "deterministic and stops exploring",
        {"entropy": entropy, "entropy_min": config.entropy_min},
        "lower the learning rate; raise the upper clip epsilon (clip-higher, 0.28); use the "
        "clip_cov or kl_cov loss; add an entropy bonus or top-entropy-quantile masking",
    )


def _zero_std(line: Mapping) -> bool:
    """Every group of the step's first rollout tied AND dynamic sampling found no informative
    group to train on (``kept_groups`` 0 or not logged): the step had no gradient signal. A
    step whose resampled groups were trained is learning, not deadlocked."""
    value = _num(line, "frac_reward_zero_std")
    kept = _num(line, "kept_groups")
    return value is not None and value >= 1 - 1e-9 and not kept


def _no_signal_hint(history: Sequence[Mapping]) -> str:
    """What to try when no group carries a reward difference, from what the run shows: its
    outputs all prose (every reward equal), dynamic sampling on but finding nothing (it
    resampled), or neither; never a setting the metrics show is already on."""
    last = history[-1]
    if (_num(last, "fallback_rate") or 0.0) >= 0.99:
        return ("almost every completion is prose, so every reward is equal: sample under the "
                "grammar (rollout.constrained: grammar) or start from a format-trained adapter "
                "(flowgrpo sft, then model.init_adapter)")  # fmt: skip
    if any((_num(line, "resampled_groups") or 0) > 0 for line in history):
        return ("dynamic sampling is on and found no informative group: raise "
                "rollout.max_resample_rounds, the group size K or the sampling temperature; mix "
                "tasks or difficulties in the prompts")  # fmt: skip
    return (
        "turn on dynamic sampling (resample or skip zero-variance groups); mix tasks or "
        "difficulties in the prompts; raise the group size K or the sampling temperature"
    )


@register_check(
    "deadlock",
    keys=("frac_reward_zero_std",),
    summary="frac_reward_zero_std = 1 and no resampled group kept, for deadlock_steps steps",
)
def check_deadlock(history: Sequence[Mapping], config: HealthConfig) -> Alert | None:
    """Every group had equal rewards for N steps: every advantage is 0, no gradient at all."""
    n = config.deadlock_steps
    if (since := _streak_since(history, n, _zero_std)) is None:
        return None
    return Alert(
        "deadlock",
        _step(history),
        f"frac_reward_zero_std = 1 for {n}+ consecutive steps (since step {since}) and dynamic "
        "sampling kept no group: every group got equal rewards, so every advantage is 0 and "
        "there is no gradient",
        {"frac_reward_zero_std": 1.0, "steps": n, "since_step": since},
        _no_signal_hint(history),
    )


def _length(line: Mapping) -> tuple[float, float | None, float | None] | None:
    mean = _num(line, "completions/mean_length")
    if mean is None:
        return None
    return mean, _num(line, "completions/min_length"), _num(line, "completions/max_length")


@register_check(
    "frozen_length",
    keys=("completions/mean_length",),
    summary="same mean completion length, min = max, for frozen_length_steps steps",
)
def check_frozen_length(history: Sequence[Mapping], config: HealthConfig) -> Alert | None:
    """Every completion has the same length for N steps: the model writes one fixed output."""
    tail = _tail(history, config.frozen_length_steps)
    if tail is None:
        return None
    lengths = [_length(line) for line in tail]
    if any(item is None for item in lengths):
        return None
    mean = lengths[-1][0]
    for m, lo, hi in lengths:
        if abs(m - mean) > 1e-9 or (lo is not None and hi is not None and hi - lo > 1e-9):
            return None
    n = config.frozen_length_steps
    return Alert(
        "frozen_length",
        _step(history),
        f"completion length frozen at {mean:g} tokens with no spread for {n}+ steps: the "
        "policy writes the same output every time",
        {"mean_length": mean, "steps": n},
        "look at samples.jsonl (flowgrpo analyze); lower the learning rate; see entropy_low",
    )


def _zero_grad(line: Mapping) -> bool:
    loss, grad = _num(line, "loss"), _num(line, "grad_norm")
    return loss is not None and grad is not None and abs(loss) <= _ZERO and abs(grad) <= _ZERO


@register_check(
    "zero_grad",
    keys=("loss", "grad_norm"),
    summary="loss = 0 and grad_norm = 0 for zero_grad_steps steps",
)
def check_zero_grad(history: Sequence[Mapping], config: HealthConfig) -> Alert | None:
    """No learning signal at all for N steps (the reward_std = 0 deadlock seen in real runs)."""
    n = config.zero_grad_steps
    if (since := _streak_since(history, n, _zero_grad)) is None:
        return None
    return Alert(
        "zero_grad",
        _step(history),
        f"loss = 0 and grad_norm = 0 for {n}+ consecutive steps (since step {since}): the "
        "optimizer is not changing the model",
        {"loss": 0.0, "grad_norm": 0.0, "steps": n, "since_step": since},
        _no_signal_hint(history) + "; check that the trainable parameters require grad",
    )


@register_check(
    "step_time_collapse",
    keys=("step_time",),
    summary="step_time < step_time_collapse_ratio x running median",
)
def check_step_time_collapse(history: Sequence[Mapping], config: HealthConfig) -> Alert | None:
    """A step much faster than usual: rollouts or executor calls are probably not happening."""
    now = _num(history[-1], "step_time")
    ratio = config.step_time_collapse_ratio
    if now is None or ratio <= 0:
        return None
    size = len(history)
    start = max(0, size - 1 - config.step_time_window)
    previous = [_num(history[i], "step_time") for i in range(start, size - 1)]
    previous = [t for t in previous if t is not None]
    if len(previous) < config.step_time_warmup:
        return None
    median = statistics.median(previous)
    if median <= 0 or not now < ratio * median:
        return None
    return Alert(
        "step_time_collapse",
        _step(history),
        f"step took {now:.3g} s, under {ratio:g} x the running median {median:.3g} s: "
        "rollouts or executor calls are probably no longer happening",
        {"step_time": now, "median": median, "ratio": ratio},
        "check the executor (server down? every output a fallback, so nothing runs?) and "
        "the generation length; see fallback_high and deadlock",
    )


@register_check(
    "adv_extreme",
    keys=("adv_frac_extreme",),
    summary="share of |A| >= 0.99 > adv_extreme_max",
)
def check_adv_extreme(history: Sequence[Mapping], config: HealthConfig) -> Alert | None:
    """Most advantages are ±1: the K=2 signature, where a valid DSL scored 0.2 gets -1.

    Reads ``adv_frac_extreme`` and, for groups of 2 (``group_size`` in the line),
    ``reward_z_frac_extreme``: the same share on within-group reward z-scores, which shows K=2
    whatever the estimator's std convention (grpo's unbiased std makes K=2 advantages ±0.707).
    Larger groups with two reward levels also have |z| = 1, so z-scores are not used for them.
    """
    keys = ["adv_frac_extreme"]
    if _num(history[-1], "group_size") == 2:
        keys.append("reward_z_frac_extreme")
    shares = [_num(history[-1], k) for k in keys]
    shares = [s for s in shares if s is not None]
    share = max(shares) if shares else None
    if share is None or not share > config.adv_extreme_max:
        return None
    return Alert(
        "adv_extreme",
        _step(history),
        f"{share:.0%} of advantages have |A| >= 0.99 (bound {config.adv_extreme_max:g}): the "
        "K=2 signature, where any reward difference becomes a full ±1",
        {"adv_frac_extreme": share, "adv_extreme_max": config.adv_extreme_max},
        "raise the group size K (>= 8); use dr_grpo (no std division) or gdpo advantages",
    )


@register_check(
    "fallback_high",
    keys=("fallback_rate",),
    summary="fallback_rate > fallback_max for fallback_steps steps",
)
def check_fallback_high(history: Sequence[Mapping], config: HealthConfig) -> Alert | None:
    """Almost every output is prose, not a workflow, for N steps."""
    high = lambda line: (_num(line, "fallback_rate") or 0.0) > config.fallback_max  # noqa: E731
    if (since := _streak_since(history, config.fallback_steps, high)) is None:
        return None
    rate = _num(history[-1], "fallback_rate")
    return Alert(
        "fallback_high",
        _step(history),
        f"fallback rate {rate:.0%} above {config.fallback_max:g} for {config.fallback_steps}+ "
        "steps: almost no output contains a workflow",
        {
            "fallback_rate": rate,
            "fallback_max": config.fallback_max,
            "since_step": since,
        },
        "check the prompt and its examples (flowgrpo analyze on samples.jsonl); give the "
        "validity reward more weight; lower the learning rate; use the rollback guard",
    )


def _unscorable(config: HealthConfig) -> Callable[[Mapping], bool]:
    return lambda line: (_num(line, "unscorable_rate") or 0.0) > config.unscorable_max


@register_check(
    "unscorable_high",
    keys=("unscorable_rate",),
    summary="unscorable_rate > unscorable_max for unscorable_steps steps",
)
def check_unscorable_high(history: Sequence[Mapping], config: HealthConfig) -> Alert | None:
    """The executor keeps failing (server down, timeouts, 5xx, unusable answers) for N steps:
    those workflows get no accuracy or cost reward (NaN), so the run learns from validity and
    diversity alone. A missing or null rate breaks the streak."""
    high = _unscorable(config)
    if (since := _streak_since(history, config.unscorable_steps, high)) is None:
        return None
    rate = _num(history[-1], "unscorable_rate")
    return Alert(
        "unscorable_high",
        _step(history),
        f"unscorable rate {rate:.0%} above {config.unscorable_max:g} for "
        f"{config.unscorable_steps}+ steps: the executor keeps failing, so executed workflows "
        "get no accuracy or cost reward",
        {
            "unscorable_rate": rate,
            "unscorable_max": config.unscorable_max,
            "since_step": since,
        },
        "check the executor server (executor.base_url): is it up, overloaded, rate "
        "limiting? the log's 'executor server at ... failed' warnings say why; raise "
        "executor.timeout_s or executor.max_retries; stop the run (Ctrl-C saves a "
        "checkpoint) and --resume later",
    )


@register_check(
    "update_collapse",
    keys=("fallback_rate", "validity_rate"),
    summary="fallback rise / validity fall after an update: z-test p <= collapse_alpha and "
    "change >= the jump/drop",
)
def check_update_collapse(history: Sequence[Mapping], config: HealthConfig) -> Alert | None:
    """This rollout vs the one before the last update: the rule of :mod:`.collapse` (a one-sided
    two-proportion z-test at ``collapse_alpha`` plus a minimum change), the guard's rule."""
    if config.guard == "off":
        return None
    event = collapse_at(history, len(history) - 1, config.collapse_rule)
    if event is None:
        return None
    values = event.to_dict()
    for key in ("step", "reason", "decided", "collapse"):
        values.pop(key)
    return Alert(
        "update_collapse",
        _step(history),
        f"update -> collapse since step {event.before_step}: {event.reason}",
        values,
        "raise the group size K (>= 8); use dr_grpo or gdpo; lower the learning rate; set "
        "health.guard to rollback",
    )
