"""The ``executor:`` section of a config (:class:`ExecutorConfig`).

Data only: checking, no backend (:mod:`.build` builds one). Which kinds there are, and what a
plugin kind's ``options`` may hold, are looked up when the run is built, not here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from flowgrpo.configuration import check, check_types
from flowgrpo.dsl.validate import DEFAULT_MAX_CALLS

__all__ = ["BUILT_IN_KINDS", "ExecutorConfig"]

#: Kinds the executor builder builds itself (any other is a backend kind of ``BACKENDS``).
BUILT_IN_KINDS = ("shared", "hf", "openai")


@dataclass(frozen=True)
class ExecutorConfig:
    """The executor: the LLM that runs a workflow's operators, and the budgets of one run.

    Attributes:
        kind: shared (the policy's base weights, adapter disabled), hf (a separate model,
            ``model``), openai (an OpenAI-compatible server at ``base_url``), or a backend kind
            in ``BACKENDS``: simulated (the SIMULATED executor of ``simulation``: accuracies
            come from a model of operators, not from an LLM), a kind a plugin registered, or a
            dotted path ``pkg.mod:make`` (see :mod:`.build` for how it is called).
        model: hf: the model loaded (name or path; ``default`` = SmolLM2-135M-Instruct);
            openai: the model name sent to the server (``default``: FLOWGRPO_EXECUTOR_MODEL);
            a plugin kind: passed as ``model=`` unless ``default``. Unused by shared.
        base_url: openai: the server root including the API prefix, e.g.
            ``http://localhost:8000/v1`` (null: FLOWGRPO_EXECUTOR_BASE_URL, then
            OPENAI_BASE_URL); a plugin kind: passed as ``base_url=`` when set.
        max_new_tokens: cap on the tokens one executor call generates (tokens).
        temperature: the executor LLM's sampling temperature, kinds shared, hf and openai (0 =
            greedy, the default). Above 0 the runs of one workflow can answer differently, so
            ``rollout.executions`` > 1 averages that noise (greedy repeats are identical).
        seed: base of the per-request seeds when sampling (kinds shared, hf, openai): each
            request is seeded from it and its operator call (problem, operator, call index,
            repeat), so a rerun draws the same answers and repeats draw afresh; hf/shared
            sample each request from its own generator (the Gumbel-max trick), openai sends it
            as the request's ``seed`` (vLLM honours it; OpenAI on a best-effort basis).
        timeout_s: openai: read timeout of one attempt (seconds; connecting gets
            min(5, this)).
        max_retries: openai: extra attempts after a timeout, dropped connection, HTTP 429 or
            5xx (0 = one attempt). One call fails after at most about (max_retries + 1) x
            timeout_s plus the delays; its workflow is then unscorable (NaN reward,
            ``unscorable_rate``), never scored 0.
        backoff_s: openai: delay before the first retry (seconds), doubled per retry up to
            8 s and jittered; a 429's Retry-After is honoured up to 60 s.
        max_calls: executor calls one workflow run may make (calls; Programmer/Test retries
            count): THE call budget of a run. The DSL's static bound (a valid workflow's
            worst-case executor calls, MdEnsemble's votes and Programmer's retries counted:
            ``Limits.static_limits``), the interpreter's budget and the cost reward's
            normaliser (``rewards.options.cost_max_calls``) are derived from it.
        max_seconds: wall-clock budget of one workflow run (seconds, across batched rounds).
        options: settings of a plugin kind, a mapping its plugin reads and checks when the run
            is built (the ``check`` its ``register_backend`` gave): kind simulated takes
            ``seed``, ``params`` and ``sandbox`` (docs/SIMULATED_EXECUTOR.md). Empty for the
            built-in kinds.
    """

    kind: str = "shared"
    model: str = "default"
    base_url: str | None = None
    max_new_tokens: int = 160
    temperature: float = 0.0
    seed: int = 0
    timeout_s: float = 120.0
    max_retries: int = 4
    backoff_s: float = 0.5
    max_calls: int = DEFAULT_MAX_CALLS
    max_seconds: float = 120.0
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        check_types(self, "executor.")
        check(  # a plugin's backend kind or dotted path is looked up when the run is built
            isinstance(self.kind, str) and bool(self.kind.strip()),
            "executor.kind",
            "name an executor: shared, hf, openai, a backend kind (a plugin's) or 'pkg.mod:make'",
        )
        check(bool(str(self.model).strip()), "executor.model", "name a model, or default")
        check(self.max_new_tokens >= 1, "executor.max_new_tokens", "must be >= 1 (tokens)")
        self._check_sampling()
        check(self.timeout_s > 0, "executor.timeout_s", "must be > 0 seconds")
        check(
            isinstance(self.max_retries, int) and self.max_retries >= 0,
            "executor.max_retries",
            "must be an integer >= 0 (0 = one attempt, no retry)",
        )
        check(self.backoff_s >= 0, "executor.backoff_s", "must be >= 0 seconds")
        check(self.max_calls >= 1, "executor.max_calls", "must be >= 1 (calls per workflow)")
        check(self.max_seconds > 0, "executor.max_seconds", "must be > 0 seconds")
        check(
            isinstance(self.options, Mapping),
            "executor.options",
            "expected a mapping of the executor plugin's settings, e.g. {seed: 0}",
        )
        check(
            not self.options or self.kind not in BUILT_IN_KINDS,
            "executor.options",
            f"kind {self.kind} takes no options; they are the settings of a plugin's kind",
        )

    def _check_sampling(self) -> None:
        check(
            isinstance(self.temperature, (int, float)) and self.temperature >= 0,
            "executor.temperature",
            "must be a number >= 0 (0 = greedy)",
        )
        check(
            isinstance(self.seed, int) and not isinstance(self.seed, bool) and self.seed >= 0,
            "executor.seed",
            "must be an integer >= 0",
        )
        check(
            self.kind in BUILT_IN_KINDS or (self.temperature == 0 and self.seed == 0),
            "executor.temperature" if self.temperature else "executor.seed",
            f"kind {self.kind} is a plugin's: its settings go in executor.options "
            "(temperature and seed are those of shared, hf and openai)",
        )
