"""shortest_closing: every prefix of a valid workflow closes into a valid workflow, with the
call count validate's own counter gives; the shortest finish on hand-checked prefixes."""

import copy
import random

import pytest

from flowgrpo.dsl import AFLOW_OPERATORS, OperatorSpec, OperatorTable, StaticLimits, validate
from flowgrpo.dsl.closing import Closing, _scan, scan_prefix, shortest_closing
from flowgrpo.dsl.generate import random_workflow
from flowgrpo.dsl.shape import count_calls


def _valid_workflows(domain: str, n: int, seed: int) -> list[str]:
    rng, out = random.Random(seed), []
    while len(out) < n:
        report = validate(random_workflow(rng), domain=domain)
        if report.ok:
            out.append(report.canonical)
    return out


@pytest.mark.parametrize("domain", ["math", "code"])
def test_every_prefix_of_a_valid_workflow_closes_with_validates_call_count(domain):
    for text in _valid_workflows(domain, 150, seed=7):
        for k in range(len(text) + 1):
            closing = shortest_closing(text[:k], domain)
            assert closing is not None, text[:k]
            report = validate(text[:k] + closing.text, domain=domain)
            assert report.ok, (text[:k], closing, [e.code for e in report.errors])
            assert closing.calls == count_calls(report.workflow.root), text[:k]
        assert shortest_closing(text, domain).text == ""


@pytest.mark.parametrize(
    ("prefix", "text", "calls"),
    [
        ("", "Custom", 1),
        ("Pro", "grammer", 1),
        ("[", "Custom, Custom]", 2),
        ("[Programmer", ", Custom]", 2),
        ("[Programmer, Custom] -> Md", "Ensemble", 3),
        ("Custom -> Review ? ", "done : done", 2),
        ("Custom -> Review ? (Revise", ") : done", 3),
        ('Custom("abc', '")', 1),
        ("(Custom -> Review ? Revise : done) * ", "1", 3),
        ("(Custom -> Review ? Revise : done) * 3", "", 9),
        ("Custom * 2 ", "-> Custom", 3),  # not "* 1": a loop step cannot loop again
        ("[(Programmer -> Review ? (Revise", ") : done), Custom]", 4),
    ],
)
def test_the_shortest_finish_by_hand(prefix, text, calls):
    assert shortest_closing(prefix, "math") == shortest_closing(prefix, "math", check=True)
    closing = shortest_closing(prefix, "math")
    assert (closing.text, closing.calls) == (text, calls)


def test_a_finish_over_the_call_budget_is_refused_only_when_checked():
    prefix = "(Custom -> Custom) * 5 -> "  # already 10 calls; the finish adds one
    assert shortest_closing(prefix, "math").calls == 11
    assert shortest_closing(prefix, "math", limits=StaticLimits(max_calls=10), check=True) is None


def test_a_user_generator_finishes_when_it_is_the_shortest():
    table = OperatorTable.from_data([{"name": "Go", "role": "generator", "domains": ["math"]}])
    assert shortest_closing("[Go", "math", operators=table).text == ", Go]"


def test_text_that_is_not_a_prefix_has_no_closing():
    assert shortest_closing("Custom ]", "math") is None
    assert shortest_closing("Nope", "math") is None


def test_the_measure_picks_the_finish():
    # by characters "Custom"; by a measure that prices Custom high, another generator
    def measure(s: str) -> int:
        return len(s) + (100 if "Custom" in s else 0)

    assert shortest_closing("", "math", measure=measure).text != "Custom"


@pytest.mark.parametrize("domain", ["math", "code"])
def test_a_scan_resumed_from_any_cut_equals_the_whole_scan(domain):
    # shortest_closing scans a prefix once and goes on from there for each finish it tries
    # (a finish never continues the prefix's last name or number): from every cut of a valid
    # workflow between lexemes, the resumed scan must be the whole text's own, and the scan it
    # went on from must be left as it was
    names = OperatorTable.from_data([]).for_domain(domain)
    for text in _valid_workflows(domain, 40, seed=11):
        whole = _scan(text, names)
        for k in range(len(text) + 1):
            if 0 < k < len(text) and (text[k - 1] + text[k]).replace("_", "a").isalnum():
                continue  # inside a name or a number: "Custom" of "CustomCodeGenerate"
            start = _scan(text[:k], names)
            if start[2] < k:  # the cut is inside a separator: the scan stopped before it
                continue
            before = copy.deepcopy(start)
            assert _scan(text, names, start) == whole, (text, k)
            assert start == before, (text, k)


@pytest.mark.parametrize("domain", ["math", "code"])
def test_a_closing_from_a_shorter_prefixs_scan_is_the_closing_without_it(domain):
    # the end game hands every candidate the scan of the row's text before it: from any
    # shorter prefix (inside a name too, where it must not go on from it, and a scan of the
    # other domain, whose operators differ) the closing must be the one computed from scratch
    other = scan_prefix("Programmer -> ", "code" if domain == "math" else "math")
    for text in _valid_workflows(domain, 25, seed=5):
        for k in range(len(text) + 1):
            plain = shortest_closing(text[:k], domain)
            for j in {0, max(k - 1, 0), max(k - 3, 0), k // 2}:
                start = scan_prefix(text[:j], domain)
                assert shortest_closing(text[:k], domain, start=start) == plain, (text, j, k)
            assert shortest_closing(text[:k], domain, start=other) == plain, (text, k)


def test_a_scan_of_another_domain_is_not_gone_on_from():
    # CustomCodeGenerate is a code operator: math cannot finish a text that opens with it
    start = scan_prefix("CustomCodeGenerate -> ", "code")
    assert start is not None and scan_prefix("CustomCodeGenerate -> ", "math") is None
    assert shortest_closing("CustomCodeGenerate -> Cus", "math", start=start) is None


def test_a_scan_that_stops_inside_a_separator_is_no_start():
    assert scan_prefix("Custom -", "math") is None
    assert scan_prefix("Custom ]", "math") is None
    assert scan_prefix("Custom -> ", "math").text == "Custom -> "


#: operators that count several calls (a run's votes, retries, fix rounds)
WEIGHED = StaticLimits(max_calls=40, op_calls={"Programmer": 2, "MdEnsemble": 3, "Test": 2})


@pytest.mark.parametrize("domain", ["math", "code"])
def test_a_closing_counts_each_operator_as_the_limits_weigh_it(domain):
    for text in _valid_workflows(domain, 60, seed=11):
        for k in range(len(text) + 1):
            closing = shortest_closing(text[:k], domain, limits=WEIGHED)
            report = validate(text[:k] + closing.text, domain=domain, limits=WEIGHED)
            assert report.ok, (text[:k], closing)
            by_hand = count_calls(report.workflow.root, lambda op: WEIGHED.calls_of(op.name))
            assert closing.calls == report.calls == by_hand, text[:k]


def test_a_scan_with_other_weights_is_not_gone_on_from():
    start = scan_prefix("Programmer -> ", "math")  # Programmer counted once
    closing = shortest_closing("Programmer -> Cus", "math", limits=WEIGHED, start=start)
    assert closing.calls == 3  # Programmer 2 + Custom 1, as from scratch
    assert closing == shortest_closing("Programmer -> Cus", "math", limits=WEIGHED)


def test_a_closing_counts_what_the_table_declares():
    table = AFLOW_OPERATORS.extend(OperatorSpec("Debate", "refiner", calls=3))
    closing = shortest_closing("Custom -> Deb", "math", operators=table)
    assert closing == Closing("ate", 4)  # Custom 1 + Debate 3
    report = validate("Custom -> Debate", domain="math", operators=table)
    assert report.calls == 4
    start = scan_prefix("Custom -> Debate -> ", "math")  # the default table: no Debate
    assert start is None
    start = scan_prefix("Custom -> Debate -> ", "math", table)
    closing = shortest_closing("Custom -> Debate -> Cus", "math", operators=table, start=start)
    assert closing.calls == 5
    override = StaticLimits(op_calls={"Debate": 2})  # a run's settings override the table
    assert shortest_closing("Custom -> Debate", "math", table, override).calls == 3
    assert validate("Custom -> Debate", operators=table, limits=override).calls == 3
