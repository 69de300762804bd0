"""The parameters of the SIMULATED executor: one frozen dataclass, every probability documented.

Where the defaults come from. They are *not* fitted to any dataset; they are chosen so that the
simulated executor reproduces the qualitative pattern published for real executors on
arithmetic word problems, which is all a known-optimum environment needs:

* hand-designed workflows differ by a few to ten points: AFlow (arXiv 2410.10762, Table 1,
  GSM8K and MATH with GPT-4o-mini) and ScoreFlow (arXiv 2502.04306) report IO, CoT, CoT-SC,
  Self-Refine and their searched workflows within a few points of each other;
* a program run by an interpreter beats free-text reasoning on arithmetic (PAL, arXiv
  2211.10435; Program of Thoughts, arXiv 2211.12588), hence ``programmer_correct`` above
  ``custom_correct``;
* majority voting helps, but less than independent samples would suggest, because samples of
  one model share their mistakes (self-consistency, arXiv 2203.11171), hence a latent class per
  problem (``latent_shares``, ``latent_spread``; an item-response model) shared by all calls;
* intrinsic self-correction rarely helps and can hurt (Huang et al., arXiv 2310.01798;
  Self-Refine, arXiv 2303.17651, gains mostly with useful feedback), hence a low
  ``revise_fix_blind``, a Review that false-alarms, and a Revise that breaks right answers
  it was told are wrong (``revise_break``).

Per-difficulty fields hold one probability per arithmetic difficulty, in the order of
:data:`DIFFICULTIES`; problems without a known difficulty use ``default_difficulty``.

Problem kinds. Operator skill may also differ by what a problem is about: ``templates`` holds,
per template (``problem.meta["template"]``), the operator probabilities that differ for its
problems. The analysis key of a problem, its *kind*, is its difficulty (``"hard"``), or
``"hard/rates"`` when the world overrides its template (:meth:`SimulationParams.kind`); every
exact computation (``operators.simulation.analytic``) takes kinds where it took difficulties.
A real executor's skill does vary this way: program-aided solving gains most on problems
whose arithmetic is the hard part and least where the difficulty is in reading the story
(PAL, arXiv 2211.10435, Table 1 by dataset), and self-correction helps only where a
critique can find the error (Huang et al., arXiv 2310.01798).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from flowgrpo.configuration import ConfigError, from_dict

DIFFICULTIES = ("easy", "medium", "hard")
"""The difficulties of the arithmetic generator (``operators.tasks.arithmetic.DIFFICULTIES``)."""

PerDifficulty = tuple[float, float, float]

LATENT_FIELDS = (
    "custom_correct",
    "answer_generate_correct",
    "programmer_correct",
    "custom_fix",
)
"""Probabilities that depend on the problem's latent class (the others do not)."""

LATENT_CLASSES = ("familiar", "uncertain", "trap")
"""The latent classes of a problem for the executor, in the order of ``latent_shares``."""

PER_DIFFICULTY = (
    "custom_correct",
    "answer_generate_correct",
    "programmer_correct",
    "custom_fix",
    "review_detect",
    "revise_fix",
    "revise_fix_blind",
)
"""Fields with one probability per difficulty."""


TEMPLATE_FIELDS = (
    "custom_correct",
    "answer_generate_correct",
    "programmer_correct",
    "programmer_crash",
    "custom_keep",
    "custom_fix",
    "review_detect",
    "review_false_alarm",
    "revise_fix",
    "revise_fix_blind",
    "revise_break",
    "revise_break_blind",
    "ensemble_tie_skill",
)
"""The operator probabilities a template may override (the problem-level ones, latent class
and default difficulty, hold for the whole world)."""

Overrides = tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]
"""``templates`` as stored: ``((template, ((field, value), ...)), ...)``, sorted (hashable)."""


@dataclass(frozen=True)
class Probs:
    """The probabilities for one difficulty and one latent class (derived, not set).

    Field meanings are those of :class:`SimulationParams`.
    """

    custom_correct: float
    answer_generate_correct: float
    programmer_correct: float
    programmer_crash: float
    custom_keep: float
    custom_fix: float
    review_detect: float
    review_false_alarm: float
    revise_fix: float
    revise_fix_blind: float
    revise_break: float
    revise_break_blind: float
    ensemble_tie_skill: float


@dataclass(frozen=True)
class SimulationParams:
    """Probabilities of the SIMULATED executor (see the module docstring for their sources).

    "Right"/"wrong" below is the verdict of the real answer checker on the solution text.
    Per-difficulty fields are ``(easy, medium, hard)``; in :meth:`from_dict` they may also be one
    number (all difficulties) or a mapping ``{"easy": .., "medium": .., "hard": ..}``.

    Attributes:
        custom_correct: Custom without a current solution answers right (per difficulty).
        answer_generate_correct: AnswerGenerate answers right (per difficulty).
        programmer_correct: Programmer's program prints the right answer, given that it runs
            (per difficulty).
        programmer_crash: one Programmer attempt writes a program that raises (the real sandbox
            runs it and Programmer retries with the error, ``OpSettings.programmer_retries``).
        custom_keep: Custom shown a right current solution keeps it right.
        custom_fix: Custom shown a wrong (or no usable) current solution makes it right (per
            difficulty).
        review_detect: Review says FAIL on a wrong solution (per difficulty).
        review_false_alarm: Review says FAIL on a right solution.
        revise_fix: Revise makes a wrong solution right when the feedback is a Review FAIL
            critique (per difficulty).
        revise_fix_blind: Revise makes a wrong solution right without a critique (no feedback,
            a PASS verdict, or a Programmer error) (per difficulty).
        revise_break: Revise makes a right solution wrong when told by a critique that it is
            wrong (a Review false alarm).
        revise_break_blind: Revise makes a right solution wrong without a critique.
        ensemble_tie_skill: when no answer has a plurality (exactly one candidate is right and
            wrong candidates are counted as disagreeing), an ensembler pick is right with
            probability ``1/n + skill * (1 - 1/n)``: 0 is a blind pick, 1 always finds the right
            one. With two or more right candidates the pick is right; with none it is wrong.
        latent_shares: shares of problems in each latent class of :data:`LATENT_CLASSES`
            (familiar, uncertain, trap; sum 1). The class is drawn once per problem and shared by
            all calls on it, which correlates them as samples of one model are correlated
            (majority votes and self-correction then gain a few points, not dozens).
        latent_spread: how far apart the classes are, in logits (>= 0; 0: no correlation). A
            probability ``p`` of :data:`LATENT_FIELDS` becomes ``sigmoid(b + spread)``,
            ``sigmoid(b)`` and ``sigmoid(b - spread)`` in the three classes, ``b`` chosen so that
            the average over problems is ``p`` (a Rasch / item-response model).
        default_difficulty: the difficulty of problems that carry none (GSM8K, ...).
        templates: operator probabilities that differ for the problems of one template
            (``problem.meta["template"]``: the arithmetic generator's shopping, sharing, rates,
            ages, combo; a problems file may carry a ``template`` key). :meth:`from_dict` takes
            ``{template: {field: value}}`` with fields of :data:`TEMPLATE_FIELDS` (per-difficulty
            ones written as above); every other value holds for them too. Empty: skill depends
            on difficulty alone.
    """

    custom_correct: PerDifficulty = (0.74, 0.65, 0.52)
    answer_generate_correct: PerDifficulty = (0.76, 0.67, 0.55)
    programmer_correct: PerDifficulty = (0.88, 0.80, 0.70)
    programmer_crash: float = 0.04
    custom_keep: float = 0.95
    custom_fix: PerDifficulty = (0.30, 0.25, 0.20)
    review_detect: PerDifficulty = (0.70, 0.60, 0.50)
    review_false_alarm: float = 0.10
    revise_fix: PerDifficulty = (0.25, 0.20, 0.15)
    revise_fix_blind: PerDifficulty = (0.08, 0.06, 0.04)
    revise_break: float = 0.15
    revise_break_blind: float = 0.03
    ensemble_tie_skill: float = 0.3
    latent_shares: tuple[float, float, float] = (0.6, 0.25, 0.15)
    latent_spread: float = 4.0
    default_difficulty: str = "medium"
    templates: Overrides = ()

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if f.name in ("default_difficulty", "latent_spread", "latent_shares", "templates"):
                continue
            value = getattr(self, f.name)
            if f.name in PER_DIFFICULTY:
                _check_per(f.name, value, DIFFICULTIES, "probability per difficulty")
            else:
                _check_probability(f.name, value)
        if self.default_difficulty not in DIFFICULTIES:
            raise ValueError(
                f"SimulationParams.default_difficulty: {self.default_difficulty!r} is not a "
                f"difficulty; use one of {DIFFICULTIES}"
            )
        self._check_latent()
        self._check_templates()

    def _check_templates(self) -> None:
        if not isinstance(self.templates, tuple):
            raise ValueError("SimulationParams.templates: expected {template: {field: value}}")
        for name, pairs in self.templates:
            where = f"SimulationParams.templates.{name}"
            if not isinstance(name, str) or not name or "/" in name:
                raise ValueError(f"{where}: a template is a name without '/', got {name!r}")
            unknown = sorted(k for k, _ in pairs if k not in TEMPLATE_FIELDS)
            if unknown:
                raise ValueError(f"{where}: {unknown} cannot differ by template; use fields of "
                                 f"{TEMPLATE_FIELDS}")  # fmt: skip
            try:
                _for_template(self, name)
            except ValueError as exc:
                raise ValueError(str(exc).replace("SimulationParams.", f"{where}.", 1)) from None

    def _check_latent(self) -> None:
        shares = self.latent_shares
        _check_per("latent_shares", shares, LATENT_CLASSES, "share per class")
        if abs(sum(shares) - 1.0) > 1e-9:
            raise ValueError(
                f"SimulationParams.latent_shares: {shares} sum to {sum(shares):g}; the shares of "
                "the classes must sum to 1"
            )
        spread = self.latent_spread
        if isinstance(spread, bool) or not isinstance(spread, (int, float)):
            raise ValueError(f"SimulationParams.latent_spread: expected a number, got {spread!r}")
        if not 0.0 <= spread <= 20.0:
            raise ValueError(
                f"SimulationParams.latent_spread: {spread} is out of range; use 0 (independent "
                "calls) to 20 logits"
            )

    # ------------------------------------------------------------------ derived views

    def difficulty(self, level: str | None) -> str:
        """``level`` when it is a known difficulty, else ``default_difficulty``."""
        return level if level in DIFFICULTIES else self.default_difficulty

    def latent_class(self, u: float) -> int:
        """The latent class (index into :data:`LATENT_CLASSES`) of a uniform draw ``u``."""
        total = 0.0
        for index, share in enumerate(self.latent_shares):
            total += share
            if u < total:
                return index
        return max(i for i, share in enumerate(self.latent_shares) if share > 0)

    def probs(self, kind: str | None, latent: int = 1) -> Probs:
        """The probabilities on a problem of ``kind`` (a difficulty, or ``difficulty/template``
        from :meth:`kind`) in latent class ``latent``."""
        level, _, template = (kind or "").partition("/")
        if not template:
            return _probs(self, self.difficulty(level), latent)
        if template not in self.template_names:
            raise ValueError(f"kind {kind!r}: this world overrides no template {template!r} "
                             f"(it overrides {list(self.template_names)})")  # fmt: skip
        return _probs(_for_template(self, template), self.difficulty(level), latent)

    @property
    def template_names(self) -> tuple[str, ...]:
        """The templates this world overrides."""
        return tuple(name for name, _ in self.templates)

    def kind(self, difficulty: str | None, template: str | None = None) -> str:
        """A problem's kind, the key of every exact computation: its difficulty (the default
        one when unknown), followed by ``/template`` when this world overrides its template."""
        level = self.difficulty(difficulty)
        return f"{level}/{template}" if template in self.template_names else level

    def kind_of(self, problem: Any) -> str:
        """:meth:`kind` of a problem (its ``meta`` difficulty and template)."""
        meta = getattr(problem, "meta", None) or {}
        return self.kind(meta.get("difficulty"), meta.get("template"))

    def kinds(self) -> tuple[str, ...]:
        """Every kind of this world: the difficulties, then each with each template."""
        with_templates = (f"{d}/{t}" for d in DIFFICULTIES for t in self.template_names)
        return (*DIFFICULTIES, *with_templates)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (per-difficulty fields as ``{difficulty: p}``); :meth:`from_dict` inverts."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name != "templates":
                out[f.name] = _plain_value(f.name, getattr(self, f.name))
        if self.templates:  # left out when empty: a world's digest is what it was before
            out["templates"] = {
                name: {k: _plain_value(k, v) for k, v in pairs} for name, pairs in self.templates
            }
        return out

    def digest(self) -> str:
        """A short stable hash of every field (part of the simulated executor's settings key)."""
        text = json.dumps(self.to_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> SimulationParams:
        """Parameters from plain data (a config section); missing fields keep their defaults.

        Raises ``ValueError`` for an unknown field (with the closest name) or a bad value
        (naming the field and what to write instead).
        """
        if data is None:
            return cls()
        if isinstance(data, SimulationParams):
            return data
        if not isinstance(data, Mapping):
            raise ValueError(f"simulation params must be a mapping, got {type(data).__name__}")
        # Per-difficulty fields accept one number, three, or a {difficulty: p} mapping: turn
        # them into the tuple the field holds, then build with the one config style.
        data = {k: _per_difficulty(k, v) if k in PER_DIFFICULTY else v for k, v in data.items()}
        templates = data.pop("templates", None)
        params = from_dict(cls, data, "executor.options.params.")
        if not templates:
            return params
        try:
            return dataclasses.replace(params, templates=_templates(templates))
        except ValueError as exc:
            raise ConfigError(f"executor.options.params: {exc}") from None


@lru_cache(maxsize=4096)
def _probs(params: SimulationParams, level: str, latent: int) -> Probs:
    index = DIFFICULTIES.index(level)
    values: dict[str, float] = {}
    for f in dataclasses.fields(Probs):
        value = getattr(params, f.name)
        value = value[index] if f.name in PER_DIFFICULTY else value
        if f.name in LATENT_FIELDS:
            value = _in_class(value, params.latent_shares, params.latent_spread, latent)
        values[f.name] = value
    return Probs(**values)


@lru_cache(maxsize=256)
def _for_template(params: SimulationParams, template: str) -> SimulationParams:
    """``params`` with ``template``'s overrides applied (and no templates of its own)."""
    pairs = dict(params.templates)[template]
    return dataclasses.replace(params, templates=(), **dict(pairs))


def _plain_value(name: str, value: Any) -> Any:
    return dict(zip(DIFFICULTIES, value)) if name in PER_DIFFICULTY else value


def _templates(value: Any) -> Overrides:
    """``{template: {field: value}}`` as stored (per-difficulty values as tuples, sorted)."""
    if not isinstance(value, Mapping):
        raise ValueError(
            f"SimulationParams.templates: expected {{template: {{field: value}}}}, got {value!r}"
        )
    out = []
    for name, fields in value.items():
        if not isinstance(fields, Mapping):
            raise ValueError(f"SimulationParams.templates.{name}: expected {{field: value}}, "
                             f"got {fields!r}")  # fmt: skip
        try:
            pairs = [(k, _per_difficulty(k, v) if k in PER_DIFFICULTY else v)
                     for k, v in fields.items()]  # fmt: skip
        except ValueError as exc:
            where = f"SimulationParams.templates.{name}."
            raise ValueError(str(exc).replace("SimulationParams.", where, 1)) from None
        out.append((str(name), tuple(sorted(pairs))))
    return tuple(sorted(out))


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


@lru_cache(maxsize=4096)
def _in_class(p: float, shares: tuple[float, ...], spread: float, latent: int) -> float:
    """``sigmoid(b + shift[latent])`` with ``b`` solved (bisection) so that the share-weighted
    mean over the classes is ``p``."""
    if p <= 0.0 or p >= 1.0 or spread == 0.0:
        return float(p)
    shifts = (spread, 0.0, -spread)
    low, high = -60.0, 60.0
    for _ in range(200):
        b = 0.5 * (low + high)
        mean = sum(w * _sigmoid(b + t) for w, t in zip(shares, shifts))
        low, high = (b, high) if mean < p else (low, b)
    return _sigmoid(0.5 * (low + high) + shifts[latent])


def _check_per(name: str, value, labels: tuple[str, ...], what: str) -> None:
    """``value``: a tuple of one probability per label (a difficulty, a latent class)."""
    if not isinstance(value, tuple) or len(value) != len(labels):
        raise ValueError(f"SimulationParams.{name}: expected one {what} {labels}, got {value!r}")
    for label, p in zip(labels, value):
        _check_probability(f"{name}[{label}]", p)


def _check_probability(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(
            f"SimulationParams.{name}: expected a probability (a number in [0, 1]), got {value!r}"
        )
    if not 0.0 <= float(value) <= 1.0:
        raise ValueError(
            f"SimulationParams.{name}: {value} is not a probability; use a number in [0, 1]"
        )


def _per_difficulty(name: str, value: Any) -> tuple:
    """A per-difficulty value from one number, a sequence of three, or a difficulty mapping."""
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - set(DIFFICULTIES))
        missing = [d for d in DIFFICULTIES if d not in value]
        if unknown or missing:
            raise ValueError(
                f"SimulationParams.{name}: a mapping needs exactly the keys {DIFFICULTIES} "
                f"(unknown: {unknown}, missing: {missing})"
            )
        return tuple(value[d] for d in DIFFICULTIES)
    if isinstance(value, (list, tuple)):
        return tuple(value)
    return (value,) * len(DIFFICULTIES)


__all__ = [
    "DIFFICULTIES",
    "LATENT_CLASSES",
    "LATENT_FIELDS",
    "PER_DIFFICULTY",
    "TEMPLATE_FIELDS",
    "Probs",
    "SimulationParams",
]
