"""Seeded generator of multi-step arithmetic word problems with exact integer answers.

Five templates: ``shopping`` (money in and out), ``sharing`` (ends in an exact equal split),
``rates`` (rate x time, travel or production), ``ages`` (people related by older / younger /
times as old) and ``combo`` (two quantities built separately, then combined). Each problem is
built as a story whose every sentence applies binary operations to a running integer; the
expression of the answer is recorded in ``meta["expression"]`` (e.g. ``(12 + 7) * 3``) and the
number of operators in it is the problem's operation count:

    easy: 1-2 operations, medium: 2-3, hard: 3-5.

All numbers are positive integers, every intermediate value is a non-negative integer and a
division appears only where it is exact, so the answer is an exact integer.

Determinism and the train/test split:

* Problem ``index`` of ``split`` is drawn from its own ``random.Random`` seeded with the text
  ``"arithmetic:<seed>:<split>:<index>"`` (string seeds hash with SHA-512, independent of
  ``PYTHONHASHSEED``), so splits use separate seed spaces and a problem does not depend on
  ``n``: ``generate_arithmetic(10)[:5] == generate_arithmetic(5)``.
* Disjointness is guaranteed, not just likely: every question text belongs to exactly one split,
  the one picked by the SHA-256 of the text (``split_of_question``). The generator redraws (with
  the same per-problem RNG) until the question belongs to the requested split, so no question
  can appear in two splits, for any seeds, sizes or difficulties.
* Within one call, a question equal to an earlier one of the same call is redrawn too.

Not handled: units other than the template's own, fractions, decimals, negative answers.
"""

from __future__ import annotations

import hashlib
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass

from flowgrpo.operators.tasks.base import Problem

log = logging.getLogger(__name__)

SPLITS = ("train", "validation", "test")
DIFFICULTIES = {"easy": (1, 2), "medium": (2, 3), "hard": (3, 5)}
_MAX_DRAWS = 2000
_MAX_ANSWER = 50_000


# --------------------------------------------------------------------------- expressions
@dataclass(frozen=True)
class Term:
    """An expression with its text, operator precedence (3 atom, 2 * /, 1 + -) and value."""

    text: str
    prec: int
    value: int
    ops: int = 0


def num(value: int) -> Term:
    """A literal (non-negative integer)."""
    return Term(str(value), 3, value)


def combine(left: Term, op: str, right: Term) -> Term:
    """``left op right`` with the fewest parentheses; raises ValueError on an inexact division."""
    prec = 1 if op in "+-" else 2
    left_text = f"({left.text})" if left.prec < prec else left.text
    right_needs = right.prec < prec or (op in "-/" and right.prec == prec)
    right_text = f"({right.text})" if right_needs else right.text
    if op == "+":
        value = left.value + right.value
    elif op == "-":
        value = left.value - right.value
    elif op == "*":
        value = left.value * right.value
    elif op == "/":
        if right.value == 0 or left.value % right.value:
            raise ValueError(f"inexact division {left.value} / {right.value}")
        value = left.value // right.value
    else:
        raise ValueError(f"unknown operator {op!r}")
    return Term(f"{left_text} {op} {right_text}", prec, value, left.ops + right.ops + 1)


# --------------------------------------------------------------------------- vocabulary
_PEOPLE = (
    ("Maria", "she", "her"),
    ("James", "he", "his"),
    ("Aisha", "she", "her"),
    ("Tom", "he", "his"),
    ("Lena", "she", "her"),
    ("Diego", "he", "his"),
    ("Priya", "she", "her"),
    ("Kenji", "he", "his"),
    ("Fatima", "she", "her"),
    ("Oliver", "he", "his"),
    ("Sofia", "she", "her"),
    ("Noah", "he", "his"),
    ("Chloe", "she", "her"),
    ("Ravi", "he", "his"),
    ("Emma", "she", "her"),
    ("Lucas", "he", "his"),
)
_GOODS = ("notebooks", "pens", "apples", "tickets", "comic books", "plants", "mugs", "scarves")
_TREATS = ("cookies", "cupcakes", "muffins", "brownies", "pretzels")
_THINGS = ("marbles", "stickers", "stamps", "seashells", "trading cards", "beads")
_WIDGETS = ("toy cars", "bottles", "bolts", "candles", "shirts", "bricks")
_VEHICLES = ("A train", "A bus", "A truck", "A cyclist", "A ferry")
_PURCHASES = ("a gift", "lunch", "a book", "a movie ticket", "a haircut", "a board game")
_JOBS = ("walking dogs", "mowing lawns", "selling lemonade", "washing cars", "tutoring")


def _person(rng: random.Random, taken: set[str] | None = None) -> tuple[str, str, str]:
    pool = [p for p in _PEOPLE if not taken or p[0] not in taken]
    return rng.choice(pool)


class _Retry(Exception):
    """The random choices led nowhere (too small a value, no exact divisor): draw again."""


def _divisor(rng: random.Random, value: int, low: int = 2, high: int = 12) -> int:
    choices = [d for d in range(low, high + 1) if value % d == 0 and value // d >= 1]
    if not choices:
        raise _Retry
    return rng.choice(choices)


# --------------------------------------------------------------------------- templates
# A template takes (rng, k) and returns (sentences, term) with term.ops == k, or raises _Retry.
Template = Callable[[random.Random, int], tuple[list[str], Term]]


def _opening(
    rng: random.Random, k: int, chance: float, pair: tuple[tuple[int, int], ...], plain
) -> tuple[Term, tuple[int, int] | None]:
    """A story's first quantity: with ``k >= 2``, a product of two numbers drawn from the
    ``pair`` ranges with probability ``chance`` (one operation: the pair is returned for the
    text), else one number drawn from ``plain`` (no pair)."""
    if k >= 2 and rng.random() < chance:
        a, b = rng.randint(*pair[0]), rng.randint(*pair[1])
        return combine(num(a), "*", num(b)), (a, b)
    return num(rng.randint(*plain)), None


def _shopping(rng: random.Random, k: int) -> tuple[list[str], Term]:
    name, he, his = _person(rng)
    term, pair = _opening(rng, k, 0.4, ((6, 25), (2, 9)), (20, 300))
    if pair:
        said = [f"{name} earns ${pair[0]} an hour and works {pair[1]} hours."]
    else:
        said = [f"{name} has ${term.value}."]
    saved = gifted = False
    while term.ops < k:
        left = k - term.ops
        kinds = ["spend", "earn"] + (["buy", "buy"] if left >= 2 else [])
        kinds += ([] if gifted else ["double"]) + (["half"] if left == 1 else [])
        kind = rng.choice(kinds)
        if kind == "buy":
            price = rng.randint(2, 15)
            count = rng.randint(2, max(2, min(9, term.value // price)))
            term = combine(term, "-", combine(num(count), "*", num(price)))
            said.append(f"{he.capitalize()} buys {count} {rng.choice(_GOODS)} for ${price} each.")
        elif kind == "spend":
            amount = rng.randint(3, max(3, min(150, term.value - 1)))
            term = combine(term, "-", num(amount))
            said.append(f"{he.capitalize()} spends ${amount} on {rng.choice(_PURCHASES)}.")
        elif kind == "earn":
            amount = rng.randint(5, 60)
            term = combine(term, "+", num(amount))
            said.append(f"{he.capitalize()} earns ${amount} {rng.choice(_JOBS)}.")
        elif kind == "double":
            factor = rng.choice([2, 3])
            term = combine(term, "*", num(factor))
            word = "doubles" if factor == 2 else "triples"
            gifted = True
            said.append(f"{his.capitalize()} grandmother {word} the money {he} has.")
        elif term.value % 2 == 0:
            term = combine(term, "/", num(2))
            said.append(f"{he.capitalize()} puts half of {his} money in a savings jar.")
            saved = True
        else:
            raise _Retry
        if term.value < 0:
            raise _Retry
    jar = " outside the savings jar" if saved else ""
    said.append(f"How many dollars does {name} have now{jar}?")
    return said, term


def _sharing(rng: random.Random, k: int) -> tuple[list[str], Term]:
    name, he, _ = _person(rng)
    treat = rng.choice(_TREATS)
    term, pair = _opening(rng, k, 0.6, ((2, 9), (4, 24)), (12, 240))
    if pair:
        said = [f"{name} bakes {pair[0]} trays of {treat} with {pair[1]} {treat} on each tray."]
    else:
        said = [f"{name} has {term.value} {treat}."]
    while term.ops < k - 1:
        if k - 1 - term.ops >= 2 and rng.random() < 0.4:
            bags, per = rng.randint(2, 6), rng.randint(3, 12)
            term = combine(term, "+", combine(num(bags), "*", num(per)))
            said.append(f"{he.capitalize()} buys {bags} bags with {per} {treat} in each.")
        elif rng.random() < 0.5 and term.value > 4:
            eaten = rng.randint(1, min(20, term.value - 2))
            term = combine(term, "-", num(eaten))
            said.append(f"{he.capitalize()} eats {eaten} of them.")
        else:
            extra = rng.randint(2, 30)
            term = combine(term, "+", num(extra))
            said.append(f"{_side_name(rng, name)} gives {name} {extra} more {treat}.")
    friends = _divisor(rng, term.value, 2, 12)
    term = combine(term, "/", num(friends))
    said.append(
        f"{he.capitalize()} shares all the {treat} equally among {friends} friends. "
        f"How many {treat} does each friend get?"
    )
    return said, term


def _side_name(rng: random.Random, main: str) -> str:
    return _person(rng, {main})[0]


def _rates(rng: random.Random, k: int) -> tuple[list[str], Term]:
    if rng.random() < 0.5:
        return _travel(rng, k)
    return _factory(rng, k)


def _travel(rng: random.Random, k: int) -> tuple[list[str], Term]:
    vehicle = rng.choice(_VEHICLES)
    speed, hours = rng.randint(8, 90), rng.randint(2, 8)
    term = combine(num(speed), "*", num(hours))
    said = [f"{vehicle} travels at {speed} km per hour for {hours} hours."]
    if k == 1:
        said.append("How many kilometers does it travel?")
        return said, term
    repeated = False
    while term.ops < k:
        left = k - term.ops
        if left >= 2 and rng.random() < 0.5:
            speed2, hours2 = rng.randint(8, 90), rng.randint(1, 6)
            term = combine(term, "+", combine(num(speed2), "*", num(hours2)))
            said.append(f"Then it travels at {speed2} km per hour for {hours2} more hours.")
        elif rng.random() < 0.5:
            extra = rng.randint(3, 60)
            term = combine(term, "+", num(extra))
            said.append(f"After that it goes {extra} km more.")
        elif not repeated:
            days = rng.randint(2, 7)
            term = combine(term, "*", num(days))
            said.append(f"It makes the same trip every day for {days} days.")
            repeated = True
    said.append("How many kilometers does it travel in total?")
    return said, term


def _factory(rng: random.Random, k: int) -> tuple[list[str], Term]:
    item = rng.choice(_WIDGETS)
    rate, hours = rng.randint(5, 60), rng.randint(2, 10)
    term = combine(num(rate), "*", num(hours))
    said = [f"A machine makes {rate} {item} per hour. It runs for {hours} hours."]
    boxes = k >= 3 and rng.random() < 0.5
    faulty = False
    while term.ops < k - int(boxes):
        choice = rng.random()
        if choice < 0.4 and len(said) == 1:
            days = rng.randint(2, 6)
            term = combine(term, "*", num(days))
            said.append(f"It does the same every day for {days} days.")
        elif choice < 0.7 and term.value > 10 and not faulty:
            broken = rng.randint(1, min(40, term.value // 3))
            term = combine(term, "-", num(broken))
            said.append(f"{broken} of the {item} are faulty and thrown away.")
            faulty = True
        else:
            extra = rng.randint(5, 80)
            term = combine(term, "+", num(extra))
            worker = "Another worker" if "made by hand" in said[-1] else "A worker"
            said.append(f"{worker} adds {extra} {item} made by hand.")
    good = "good " if faulty else ""
    if boxes:
        size = _divisor(rng, term.value, 2, 20)
        term = combine(term, "/", num(size))
        said.append(f"All the {good}{item} are packed into boxes of {size}. How many boxes?")
    else:
        said.append(f"How many {good}{item} are there in total?")
    return said, term


def _ages(rng: random.Random, k: int) -> tuple[list[str], Term]:
    name, _, _ = _person(rng)
    taken = {name}
    term = num(rng.randint(4, 40))
    said = [f"{name} is {term.value} years old."]
    closing = rng.random() < 0.5
    current = name
    while term.ops < k - int(closing):
        other = _person(rng, taken)[0]
        taken.add(other)
        kind = rng.choice(["older", "younger", "times", "half"])
        if kind == "older":
            gap = rng.randint(2, 30)
            term = combine(term, "+", num(gap))
            said.append(f"{other} is {gap} years older than {current}.")
        elif kind == "younger" and term.value > 5:
            gap = rng.randint(1, term.value - 2)
            term = combine(term, "-", num(gap))
            said.append(f"{other} is {gap} years younger than {current}.")
        elif kind == "times" and term.value <= 30:
            factor = rng.randint(2, 3)
            term = combine(term, "*", num(factor))
            said.append(f"{other} is {factor} times as old as {current}.")
        elif kind == "half" and term.value % 2 == 0:
            term = combine(term, "/", num(2))
            said.append(f"{other} is half as old as {current}.")
        else:
            raise _Retry
        current = other
    if closing:
        years = rng.randint(2, 15)
        if rng.random() < 0.5 or term.value <= years:
            term = combine(term, "+", num(years))
            said.append(f"How old will {current} be in {years} years?")
        else:
            term = combine(term, "-", num(years))
            said.append(f"How old was {current} {years} years ago?")
    else:
        said.append(f"How old is {current}?")
    return said, term


def _side(
    rng: random.Random, person: tuple[str, str, str], ops: int, thing: str
) -> tuple[str, Term]:
    """One person's amount with 0, 1 or 2 operations."""
    name, he, _ = person
    if ops == 0:
        count = rng.randint(10, 200)
        return f"{name} has {count} {thing}.", num(count)
    per, days = rng.randint(2, 25), rng.randint(2, 12)
    term = combine(num(per), "*", num(days))
    text = f"{name} collects {per} {thing} a day for {days} days"
    if ops == 1:
        return text + ".", term
    start = rng.randint(5, 50)
    text = f"{name} already has {start} {thing}. {he.capitalize()} collects {per} {thing} a day "
    text += f"for {days} more days."
    return text, combine(num(start), "+", term)


def _combo(rng: random.Random, k: int) -> tuple[list[str], Term]:
    thing = rng.choice(_THINGS)
    first_person = _person(rng)
    second_person = _person(rng, {first_person[0]})
    first, second = first_person[0], second_person[0]
    split = k >= 4 and rng.random() < 0.5
    side_ops = k - 1 - int(split)
    a_ops = rng.randint(max(0, side_ops - 2), min(2, side_ops))
    a_text, a = _side(rng, first_person, a_ops, thing)
    b_text, b = _side(rng, second_person, side_ops - a_ops, thing)
    said = [a_text, b_text]
    if split:
        term = combine(a, "+", b)
        boxes = _divisor(rng, term.value, 2, 10)
        term = combine(term, "/", num(boxes))
        said.append(
            f"They put all their {thing} together and split them equally into {boxes} boxes. "
            f"How many {thing} are in each box?"
        )
    elif a.value != b.value and rng.random() < 0.5:
        (big, big_name), (small, small_name) = sorted(
            [(a, first), (b, second)], key=lambda pair: -pair[0].value
        )
        term = combine(big, "-", small)
        said.append(f"How many more {thing} does {big_name} have than {small_name}?")
    else:
        term = combine(a, "+", b)
        said.append(f"How many {thing} do they have altogether?")
    return said, term


TEMPLATES: dict[str, Template] = {
    "shopping": _shopping,
    "sharing": _sharing,
    "rates": _rates,
    "ages": _ages,
    "combo": _combo,
}


# --------------------------------------------------------------------------- generation
def split_of_question(question: str) -> str:
    """The split a question text belongs to: SHA-256 bucket, 80% train, 10% validation, 10% test.

    Every text has exactly one split, which is what makes the splits disjoint by construction.
    """
    bucket = int(hashlib.sha256(question.encode("utf-8")).hexdigest()[:16], 16) % 10
    return "test" if bucket == 0 else "validation" if bucket == 1 else "train"


def _one_problem(
    rng: random.Random, difficulty: str | None, split: str, seen: set[str]
) -> tuple[str, str, str, Term]:
    """Template, difficulty and operation count are drawn once, then the story is redrawn until
    it is valid, small enough, in ``split`` and not in ``seen``."""
    level = difficulty or rng.choice(sorted(DIFFICULTIES))
    ops = rng.randint(*DIFFICULTIES[level])
    name = rng.choice(sorted(TEMPLATES))
    for _ in range(_MAX_DRAWS):
        try:
            said, term = TEMPLATES[name](rng, ops)
        except _Retry:
            continue
        question = " ".join(said)
        if term.ops != ops or not 0 <= term.value <= _MAX_ANSWER:
            continue
        if split_of_question(question) == split and question not in seen:
            return name, level, question, term
    raise _Exhausted(f"no new {split} {name} problem in {_MAX_DRAWS} draws")


class _Exhausted(Exception):
    """The draws found no question not already generated: the split's stories run out."""


def generate_arithmetic(
    n: int, seed: int = 0, difficulty: str | None = None, split: str = "train"
) -> list[Problem]:
    """Generate ``n`` arithmetic word problems (see the module docstring for the split scheme).

    Args:
        n: number of problems (>= 0).
        seed: any integer; the same (seed, split, difficulty) gives the same problems.
        difficulty: ``easy``, ``medium``, ``hard``, or None to draw one per problem.
        split: ``train``, ``validation`` or ``test``; splits never share a question text.

    Returns:
        Problems with id ``arithmetic/<split>/<index>``, domain ``math``, the answer as an integer
        in text, and meta ``expression``, ``template``, ``difficulty``, ``n_ops``.
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    if difficulty is not None and difficulty not in DIFFICULTIES:
        raise ValueError(f"unknown difficulty {difficulty!r}; choose one of {sorted(DIFFICULTIES)}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {list(SPLITS)}")
    problems: list[Problem] = []
    seen: set[str] = set()
    for index in range(n):
        rng = random.Random(f"arithmetic:{seed}:{split}:{index}")
        try:
            name, level, question, term = _one_problem(rng, difficulty, split, seen)
        except _Exhausted as exc:
            raise ValueError(
                f"the arithmetic generator ran out of distinct {split} problems after {index} of "
                f"{n} ({exc}): ask for at most {index} (--n, rollout.train_size), "
                "or use a data set (gsm8k:PATH, jsonl:PATH)"
            ) from None
        seen.add(question)
        problems.append(
            Problem(
                id=f"arithmetic/{split}/{index}",
                domain="math",
                question=question,
                answer=str(term.value),
                meta={
                    "expression": term.text,
                    "template": name,
                    "difficulty": level,
                    "n_ops": term.ops,
                },
            )
        )
    log.debug("generated %d arithmetic problems (seed %s, split %s)", n, seed, split)
    return problems
