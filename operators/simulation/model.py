"""The rules of the SIMULATED executor, shared by the backend and the analytic model.

One place decides every probability, so the executor (:mod:`operators.backends.simulated`) and
the exact analysis (:mod:`operators.simulation.analytic`) cannot drift apart. A solution is in
one of three abstract classes: :data:`RIGHT`, :data:`WRONG` (the checker says so) or
:data:`NONE` (no solution text, or an empty one). Refiners and checkers treat NONE like WRONG.

Randomness: every draw is a function of a key (seed, problem id, operator, the call's index in
its run, the prompt), hashed with SHA-256, and so is the problem's latent class (seed, problem
id): fixed seed, fixed results, whatever the batching or the order of calls.
"""

from __future__ import annotations

import hashlib
import itertools
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

from flowgrpo.operators.simulation.params import Probs, SimulationParams

NONE, RIGHT, WRONG = 0, 1, 2
"""Abstract classes of a solution: none (missing or empty), right, wrong."""


def unit_draw(*parts: object) -> float:
    """A number in [0, 1) determined by ``parts`` (SHA-256 of their text, 53 bits)."""
    text = "\x1f".join(str(p) for p in parts)
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return (int.from_bytes(digest[:8], "big") >> 11) / float(1 << 53)


def choose(weights: Sequence[float], u: float) -> int:
    """The outcome whose cumulative weight interval holds ``u`` (zero weights never win)."""
    total, last = 0.0, None
    for index, weight in enumerate(weights):
        if weight <= 0.0:
            continue
        total += weight
        last = index
        if u < total:
            return index
    if last is None:
        raise ValueError(f"no outcome has a positive weight: {list(weights)}")
    return last  # rounding: u at the very top of the range


def latent_of(params: SimulationParams, seed: int, problem_id: str, question: str) -> int:
    """The problem's latent class (index into ``LATENT_CLASSES``), drawn once per problem (its
    id and text: generators may reuse ids across seeds)."""
    digest = hashlib.sha256(question.encode("utf-8")).hexdigest()[:16]
    return params.latent_class(unit_draw(seed, problem_id, digest, "latent"))


def latent_classes(params: SimulationParams) -> list[tuple[int, float]]:
    """Every latent class with its share of problems (classes with no share left out)."""
    return [(k, share) for k, share in enumerate(params.latent_shares) if share > 0.0]


# --------------------------------------------------------------------------- operators


def custom_right(probs: Probs, shown: int | None) -> float:
    """Custom: fresh (``shown`` None), or shown a current solution of class ``shown``."""
    if shown is None:
        return probs.custom_correct
    return probs.custom_keep if shown == RIGHT else probs.custom_fix


def programmer_weights(probs: Probs) -> tuple[float, float, float]:
    """One Programmer attempt: (program raises, prints the right answer, prints a wrong one)."""
    runs = 1.0 - probs.programmer_crash
    return (
        probs.programmer_crash,
        runs * probs.programmer_correct,
        runs * (1 - probs.programmer_correct),
    )


def review_fail(probs: Probs, solution: int) -> float:
    """Review says FAIL (a NONE solution is judged like a wrong one)."""
    return probs.review_false_alarm if solution == RIGHT else probs.review_detect


def revise_right(probs: Probs, solution: int, critique: bool) -> float:
    """Revise returns a right solution; ``critique``: the feedback is a Review FAIL verdict."""
    if solution == RIGHT:
        return 1.0 - (probs.revise_break if critique else probs.revise_break_blind)
    return probs.revise_fix if critique else probs.revise_fix_blind


def pick_right(n: int, c: int, skill: float) -> float:
    """One ensembler pick among ``n`` candidates of which ``c`` are right is right.

    Wrong candidates count as disagreeing, so the right answer has a plurality when ``c >= 2``
    (always picked), none when ``c == 0``; with ``c == 1`` every answer has one vote (a tie)
    and the pick is right with probability ``1/n + skill * (1 - 1/n)``.
    """
    if c <= 0 or n <= 0:
        return 0.0
    if c >= 2 or n == 1:
        return 1.0
    return 1.0 / n + skill * (1.0 - 1.0 / n)


def candidate_weights(right: Sequence[bool], skill: float) -> list[float]:
    """Probability that one pick returns each candidate: the right (wrong) share of
    :func:`pick_right` spread evenly over the right (wrong) candidates."""
    n, c = len(right), sum(right)
    q = pick_right(n, c, skill)
    per_right = q / c if c else 0.0
    per_wrong = (1.0 - q) / (n - c) if n > c else 0.0
    return [per_right if r else per_wrong for r in right]


@lru_cache(maxsize=4096)
def md_right(n: int, c: int, votes: int, skill: float) -> float:
    """MdEnsemble ends right: ``votes`` independent picks (:func:`candidate_weights`), then the
    most common pick wins, ties to the one first voted for (``Counter.most_common``).

    Exact: sums over every sequence of votes (``n ** votes`` terms).
    """
    if n <= 0:
        return 0.0
    right = [i < c for i in range(n)]
    weights = candidate_weights(right, skill)
    total = 0.0
    for combo in itertools.product(range(n), repeat=votes):
        p = 1.0
        for index in combo:
            p *= weights[index]
        if p and right[Counter(combo).most_common(1)[0][0]]:
            total += p
    return total


__all__ = [
    "NONE",
    "RIGHT",
    "WRONG",
    "candidate_weights",
    "choose",
    "custom_right",
    "latent_classes",
    "latent_of",
    "md_right",
    "pick_right",
    "programmer_weights",
    "review_fail",
    "revise_right",
    "unit_draw",
]
