"""The ``algorithm`` section: advantage estimator, policy loss, entropy control.

Data only: the names (``advantage``, ``loss.policy_loss``, ``loss.loss_agg``) are looked up in
their registries when the run environment is built (``trainer.loop.environment``), not here, so
loading a config imports no torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from flowgrpo.configuration import check, check_types, finite_number, whole_number

__all__ = ["AlgorithmConfig", "EntropyControl", "LossConfig"]


@dataclass(frozen=True)
class LossConfig:
    """Settings of ``policy_objective``; every field is checked in ``__post_init__``.

    Attributes:
        policy_loss: registered policy loss: ``clip`` | ``gspo`` | ``clip_cov`` | ``kl_cov``.
        loss_agg: registered aggregation. Default ``seq_mean_token_sum_norm`` (Dr. GRPO, arXiv
            2503.20783): every valid token weighs 1 / (N * max_new_tokens) whatever the
            completion lengths, so there is no length bias (``seq_mean_token_mean`` penalises
            a long wrong completion less per token, which rewards rambling prose), and the
            weight does not depend on how the batch is split into micro-batches of equal
            sizes (unlike ``token_mean``, whose denominator is each micro-batch's token count).
        max_new_tokens: the generation budget, Dr. GRPO's constant normaliser (tokens). Derived
            in ONE place, ``TrainConfig.__post_init__``, from ``rollout.max_new_tokens`` when
            left None in a training config; must then equal it (a different constant silently
            rescales every gradient). Required when using this class alone with
            ``seq_mean_token_sum_norm``.
        epsilon_low, epsilon_high: PPO clip range [1 - low, 1 + high] of ``clip`` and
            ``clip_cov``. Defaults 0.2 / 0.28: DAPO's clip-higher (arXiv 2503.14476), which
            lets low-probability tokens grow further and slows entropy collapse.
        gspo_epsilon_low, gspo_epsilon_high: clip range of the *sequence* ratio of ``gspo``;
            3e-4 / 4e-4 as in the GSPO paper (arXiv 2507.18071): a length-normalised ratio
            moves far less than a token ratio.
        clip_cov_ratio, clip_cov_lb, clip_cov_ub: Clip-Cov (arXiv 2505.22617): among tokens
            whose centred covariance lies strictly in (lb, ub), a random ``ratio`` share of
            the valid tokens (at least 1) gets no gradient. 2e-4, 1, 5 as in the paper's
            scripts (PRIME-RL/Entropy-Mechanism-of-RL, recipe/dapo/7b_clip_cov.sh) and
            verl's fallback values. The share is of the whole step's valid tokens, however
            the step is split into micro-batches (``objective.batch_stats``).
        kl_cov_ratio, kl_cov_coef: KL-Cov (arXiv 2505.22617): the top ``ratio`` share of valid
            tokens (at least 1) by covariance get ``coef * |logp - old_logp|`` added. 2e-3
            ("k_percent=0.2", i.e. 0.2 %) and 1 as in the paper's 7B script
            (same repository, recipe/dapo/7b_kl_cov.sh); verl falls back to 2e-4 when unset.
        beta: weight of the k3 KL to the reference policy, the base weights with the adapter
            disabled (Schulman's estimator, as GRPO, arXiv 2402.03300; TRL's GRPOTrainer with
            PEFT). 0 = no reference forward pass needed.
        entropy_coef: entropy bonus; minimising the total with entropy_coef > 0 RAISES the
            entropy (a negative value is an entropy penalty). Default 0.
        top_entropy_frac: if set, only the top fraction of valid tokens by entropy get policy
            gradient ("Beyond the 80/20 rule", arXiv 2506.01939, uses 0.2). None = all.
        mask_truncated: give completions flagged truncated (hit max_new_tokens) mask 0, so an
            unfinished completion is neither rewarded nor punished (DAPO's overlong
            filtering); ``policy_objective`` then requires ``truncated_N``.
    """

    policy_loss: str = "clip"
    loss_agg: str = "seq_mean_token_sum_norm"
    max_new_tokens: int | None = None
    epsilon_low: float = 0.2
    epsilon_high: float = 0.28
    gspo_epsilon_low: float = 3e-4
    gspo_epsilon_high: float = 4e-4
    clip_cov_ratio: float = 2e-4
    clip_cov_lb: float = 1.0
    clip_cov_ub: float = 5.0
    kl_cov_ratio: float = 2e-3
    kl_cov_coef: float = 1.0
    beta: float = 0.0
    entropy_coef: float = 0.0
    top_entropy_frac: float | None = None
    mask_truncated: bool = False

    def __post_init__(self) -> None:
        for name in ("policy_loss", "loss_agg"):
            value = getattr(self, name)
            check(
                isinstance(value, str) and bool(value.strip()),
                f"algorithm.loss.{name}",
                f"got {value!r}; name a registered one or a dotted path 'pkg.mod:fn'",
            )
        for name, ok, fix in _RULES:
            check(
                ok(getattr(self, name)),
                f"algorithm.loss.{name}",
                f"got {getattr(self, name)!r}; {fix}",
            )
        check(
            self.clip_cov_lb < self.clip_cov_ub,
            "algorithm.loss.clip_cov_lb",
            f"{self.clip_cov_lb!r} must be below clip_cov_ub={self.clip_cov_ub!r}",
        )
        check_types(self, "algorithm.loss.")  # after the rules above: they name the fix


_UNIT = "use a value in [0, 1): the ratio floor 1 - epsilon must stay positive"
_SHARE = "a share of tokens: use a value in (0, 1]"
_NONNEG = "use a finite number >= 0"
#: (field, check, how to fix) for LossConfig.__post_init__
_RULES: tuple[tuple[str, Callable[[object], bool], str], ...] = (
    (
        "max_new_tokens",
        lambda v: v is None or (whole_number(v) and v >= 1),
        "use the rollout's generation budget, an int >= 1",
    ),
    ("epsilon_low", lambda v: finite_number(v) and 0 <= v < 1, _UNIT),
    ("epsilon_high", lambda v: finite_number(v) and v >= 0, _NONNEG),
    ("gspo_epsilon_low", lambda v: finite_number(v) and 0 <= v < 1, _UNIT),
    ("gspo_epsilon_high", lambda v: finite_number(v) and v >= 0, _NONNEG),
    ("clip_cov_ratio", lambda v: finite_number(v) and 0 < v <= 1, _SHARE),
    ("clip_cov_lb", finite_number, "use a finite number"),
    ("clip_cov_ub", finite_number, "use a finite number"),
    ("kl_cov_ratio", lambda v: finite_number(v) and 0 < v <= 1, _SHARE),
    ("kl_cov_coef", lambda v: finite_number(v) and v >= 0, _NONNEG),
    ("beta", lambda v: finite_number(v) and v >= 0, _NONNEG),
    ("entropy_coef", finite_number, "use a finite number (> 0 raises entropy, < 0 lowers it)"),
    (
        "top_entropy_frac",
        lambda v: v is None or (finite_number(v) and 0 < v <= 1),
        "use None (all tokens) or a fraction in (0, 1], e.g. 0.2",
    ),
    ("mask_truncated", lambda v: isinstance(v, bool), "use true or false"),
)


@dataclass(frozen=True)
class EntropyControl:
    """Settings of the adaptive entropy coefficient (``algorithm.entropy_control``).

    Skywork-OR1 (He et al., arXiv 2505.22312, "adaptive entropy control"): the entropy bonus's
    coefficient moves by ``delta`` each step, up while the measured entropy is below ``target``
    and down while above, within ``[0, max_coef]``; the bonus applies only while the entropy is
    at or below the target (``trainer.algorithms.entropy_control``).

    Attributes:
        target: the entropy to hold, nats per sampled token (the ``entropy`` metric). None =
            off: the loss uses ``algorithm.loss.entropy_coef`` unchanged. Skywork-OR1 uses 0.2.
        delta: change of the coefficient per training step (Skywork-OR1: 0.005).
        max_coef: the coefficient's upper bound (>= 0), so a policy that cannot raise its
            entropy is not pushed toward uniform noise. 0: the coefficient is not used.
    """

    target: float | None = None
    delta: float = 0.005
    max_coef: float = 0.05

    def __post_init__(self) -> None:
        check_types(self, "algorithm.entropy_control.")
        name = "algorithm.entropy_control"
        check(
            self.target is None or (finite_number(self.target) and self.target > 0),
            f"{name}.target",
            f"must be a positive entropy in nats per token, or null for off; got {self.target!r}",
        )
        check(finite_number(self.delta) and self.delta > 0, f"{name}.delta", "must be > 0")
        ok = finite_number(self.max_coef) and self.max_coef >= 0
        check(ok, f"{name}.max_coef", "must be >= 0")


@dataclass(frozen=True)
class AlgorithmConfig:
    """Advantage estimator, policy loss and update schedule.

    Attributes:
        advantage: grpo, dr_grpo, rloo, global or gdpo (trainer.algorithms.advantages; looked
            up when the run is built). Default dr_grpo: no std division, so a small reward gap
            gives a small advantage (Dr. GRPO, arXiv 2503.20783): no K=2 ±1 failure.
        loss: policy loss, aggregation, clipping, KL, entropy terms (:class:`LossConfig`).
        num_iterations: μ, updates per rollout (old log-probs stored when μ > 1).
        entropy_control: the entropy coefficient steered toward a target entropy
            (:class:`EntropyControl`); off by default.
        reference: the policy ``loss.beta``'s KL is taken to: ``base`` (the base weights,
            the adapter disabled: TRL's GRPOTrainer with a PEFT model) or ``start`` (the
            adapter ``model.init_adapter`` loaded, kept frozen: the initial policy, the
            reference of DeepSeekMath's GRPO, arXiv 2402.03300, and verl's ref model). From a
            trained start the base model writes prose, so a KL to it pulls the policy away from
            the start; ``start`` anchors it there instead. Needs ``model.init_adapter``.
    """

    advantage: str = "dr_grpo"
    loss: LossConfig = field(default_factory=LossConfig)
    num_iterations: int = 1
    entropy_control: EntropyControl = field(default_factory=EntropyControl)
    reference: str = "base"

    def __post_init__(self):
        check_types(self, "algorithm.")  # a name that is not text: "expected a string"
        check(self.num_iterations >= 1, "algorithm.num_iterations", "must be >= 1")
        check(self.reference in ("base", "start"), "algorithm.reference", "use base or start")
