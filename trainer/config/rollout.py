"""The ``rollout`` section: sampling and execution of workflows (:class:`RolloutConfig`). Data
only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from flowgrpo.configuration import ConfigError, check, check_types, finite_number

__all__ = ["K_WARNING", "RolloutConfig"]

K_WARNING = (
    "num_generations (K) = {k} is below 8. With K=2 and std-normalised advantages, any two "
    "different rewards give advantages of equal magnitude (±1 with the population std, ±0.707 "
    "with the unbiased one) however small the gap: a valid workflow scoring 0.2 next to one "
    "scoring 1.0 is pushed away as hard as prose. A real run collapsed into prose after 37 of 38 "
    "updates this way. Use K >= 8, or set rollout.allow_small_groups: true to reproduce it."
)


@dataclass(frozen=True)
class RolloutConfig:
    """Sampling and execution of workflows.

    Attributes:
        task: problems to train on: arithmetic[:easy|medium|hard], gsm8k:PATH, mbpp:PATH,
            humaneval (see operators.tasks).
        train_size: problems in the training pool (generated tasks); eval uses the test split.
        problems_per_step: B, problems per optimizer step.
        num_generations: K, completions per problem (the group). K >= 8 unless
            allow_small_groups (see K_WARNING); K >= 2 always.
        allow_small_groups: permit K < 8: to reproduce the K=2 collapse, or for K = 4 under an
            advantage without std division (dr_grpo), whose groups have no K=2 +-1 failure
            (configs/known-optimum.yaml: 4 problems x 4, issue 20 in RESULTS.md).
        temperature / top_p: sampling of the policy (temperature > 0: a group needs variety).
        max_new_tokens: completion budget in tokens (also Dr. GRPO's constant normaliser).
        generate_merged: sample on merged LoRA weights (faster; base weights restored exactly).
        sample_dtype: the weights' dtype while sampling training rollouts: ``model`` (the
            model's own, ``model.dtype``) or ``bfloat16`` (bf16 copies of the merged weights
            during the ``generate`` call; the update and the evaluation keep ``model.dtype``).
            On a CPU a decoding step reads every weight, so bf16 roughly halves its bytes
            (docs/BENCHMARKS.md); the rollouts are then drawn from a bf16-rounded policy, the
            rollout-training mismatch of Yao et al. 2025 ("Your Efficient RL Framework Secretly
            Brings You Off-Policy RL Training"), not importance-corrected here.
        packed_weights: on a CPU with oneDNN, sample (training rollouts, the held-out
            evaluation) on copies of the Linear weights packed into oneDNN's layout, as
            PyTorch's compiler does for CPU inference: a decoding step of SmolLM2-135M takes
            0.5-0.7x the time (docs/BENCHMARKS.md, "Packed weights"); the products equal torch's
            default kernel's to float rounding (< 1e-3 on the logits). The frozen layers'
            packed copies are kept from one call to the next (~430 MB for SmolLM2-135M in
            float32) and the LoRA layers are packed with ``W + BA`` computed beside ``W``.
            false: the default kernel, bit for bit as before. No effect on a GPU, nor on
            ``flowgrpo sft``'s check (its memory peak).
        logprob_mode: shared_prompt (prompt computed once per group) or full.
        constrained: off or grammar (sample and score only grammar-valid text; CONSTRAINED.md).
        execute: run valid workflows with the executor (the ``executor`` section; accuracy/cost
            rewards); off = validity and diversity only.
        executions: runs of each valid sampled workflow (>= 1); accuracy and cost are their
            means, a lower-variance reward (MetaAgent-X, arXiv 2605.14212, uses 4). Each costs
            a full run of executor calls; greedy model executors repeat one answer (warned).
        cache_path: JSONL file for the execution cache (relative to the run dir), or null.
        cache_max_entries: results the execution cache keeps in memory (oldest evicted first;
            each is one workflow's answer on one problem, about 1 KB).
        dynamic_sampling: drop zero-variance groups from the update and replace them with fresh
            problems (DAPO, arXiv 2503.14476), std-based.
        max_resample_rounds: bound on replacement rounds per step.
        spare_problems: fresh problems sampled in the first rollout's ``generate`` call beside
            ``problems_per_step`` and kept unscored; the first replacement round takes its
            groups from them instead of sampling anew (at the step's temperature only: not
            for tie-temperature or ``same`` rounds). The trained batch is drawn as without
            them; the call is bound by reading the weights once per decoding step, so spares
            cost less than the separate call they save (DAPO's over-sampling, verl's
            ``gen_batch_size``; docs/BENCHMARKS.md). 0: every round samples its own.
        resample: what a replacement round samples: ``fresh`` problems (DAPO) or the ``same``
            problems whose groups tied, at the tie temperature whenever a group tied (a
            screening option of issue 40: research/RECORD.md).
        tie_temperature: the sampling temperature of the replacement rounds of a step whose
            every group tied (no informative group: a collapsed policy writes one workflow K
            times, and resampling it at its own temperature draws the same again). The groups
            those rounds keep are trained with log-probs at this temperature (Polaris-style
            exploration, An et al. 2025). The trainer's response to ``deadlock``; None = the
            rounds sample at the step's temperature. Needs dynamic sampling.
        tie_temperature_step: added to the tie temperature after a tied step whose hot rounds
            kept no group either (the policy sharpens further while it stays tied), up to
            ``max_tie_temperature``; back to ``tie_temperature`` once a first rollout has an
            informative group. 0: a fixed tie temperature.
        max_tie_temperature: the tie temperature's upper bound (>= ``tie_temperature``).
        seed: problems and sampling seed (rank-offset under multiple processes).
    """

    task: str = "arithmetic"
    train_size: int = 2000
    problems_per_step: int = 2
    num_generations: int = 8
    allow_small_groups: bool = False
    temperature: float = 0.8
    top_p: float = 1.0
    max_new_tokens: int = 40
    generate_merged: bool = True
    sample_dtype: Literal["model", "bfloat16"] = "model"
    packed_weights: bool = True
    logprob_mode: Literal["shared_prompt", "full"] = "shared_prompt"
    constrained: Literal["off", "grammar"] = "off"
    execute: bool = True
    executions: int = 1
    cache_path: str | None = "execution_cache.jsonl"
    cache_max_entries: int = 200_000
    dynamic_sampling: bool = True
    max_resample_rounds: int = 1
    spare_problems: int = 0
    resample: Literal["fresh", "same"] = "fresh"
    tie_temperature: float | None = None
    tie_temperature_step: float = 0.0
    max_tie_temperature: float = 4.0
    seed: int = 0

    def __post_init__(self):
        check_types(self, "rollout.")
        k = self.num_generations
        check(
            k >= 2,
            "rollout.num_generations",
            f"K = {k}: a group needs at least 2 samples to have a baseline; use K >= 8",
        )
        if k < 8 and not self.allow_small_groups:
            raise ConfigError("rollout.num_generations: " + K_WARNING.format(k=k))
        check(self.problems_per_step >= 1, "rollout.problems_per_step", "must be >= 1")
        check(
            self.temperature > 0,
            "rollout.temperature",
            "must be > 0: greedy sampling makes every group identical (zero variance)",
        )
        check(finite_number(self.temperature), "rollout.temperature", "must be a finite number")
        check(self.train_size >= 1, "rollout.train_size", "must be >= 1 (training problems)")
        check(0 < self.top_p <= 1, "rollout.top_p", "must be in (0, 1]")
        check(self.max_new_tokens >= 1, "rollout.max_new_tokens", "must be >= 1")
        for name, ok in (
            ("logprob_mode", ("shared_prompt", "full")),
            ("constrained", ("off", "grammar")),
            ("sample_dtype", ("model", "bfloat16")),
        ):
            check(getattr(self, name) in ok, f"rollout.{name}", "use " + " or ".join(ok))
        check(self.max_resample_rounds >= 0, "rollout.max_resample_rounds", "must be >= 0")
        check(
            isinstance(self.spare_problems, int) and self.spare_problems >= 0,
            "rollout.spare_problems",
            "must be an integer >= 0 (0: no spares)",
        )
        check(
            not self.spare_problems or (self.dynamic_sampling and self.max_resample_rounds >= 1),
            "rollout.spare_problems",
            "spares serve dynamic sampling's replacement round: set dynamic_sampling: true and "
            "max_resample_rounds >= 1, or spare_problems: 0",
        )
        self._check_tie_temperature()
        check(
            isinstance(self.executions, int) and self.executions >= 1,
            "rollout.executions",
            "must be an integer >= 1 (runs of each sampled workflow; 1 = run once)",
        )
        check(
            isinstance(self.cache_max_entries, int) and self.cache_max_entries >= 1,
            "rollout.cache_max_entries",
            "must be an integer >= 1 (results kept in memory; set cache_path: null for no cache)",
        )

    def _check_tie_temperature(self) -> None:
        hot = self.tie_temperature
        if hot is None:
            return
        check(
            finite_number(hot) and hot >= self.temperature,
            "rollout.tie_temperature",
            f"must be a number >= rollout.temperature ({self.temperature}), got {hot!r}; "
            "null turns it off",
        )
        step, top = self.tie_temperature_step, self.max_tie_temperature
        check(
            finite_number(step) and step >= 0,
            "rollout.tie_temperature_step",
            f"must be a number >= 0 (0: a fixed tie temperature), got {step!r}",
        )
        check(
            finite_number(top) and top >= hot,
            "rollout.max_tie_temperature",
            f"must be a number >= rollout.tie_temperature ({hot}), got {top!r}",
        )
        check(
            self.dynamic_sampling and self.max_resample_rounds >= 1,
            "rollout.tie_temperature",
            "is the temperature of dynamic sampling's replacement rounds: set "
            "rollout.dynamic_sampling: true and max_resample_rounds >= 1, or tie_temperature: null",
        )
