"""The canonical space of math workflows (dsl/space.py)."""

from __future__ import annotations

from flowgrpo.dsl import StaticLimits, count_calls, validate
from flowgrpo.dsl.space import workflow_space

WIDE = StaticLimits(max_calls=20)


def test_the_space_holds_2275_distinct_valid_canonical_math_workflows():
    space = workflow_space()
    assert len(space) == 2275 and len(set(space)) == 2275
    for text in space:
        report = validate(text, domain="math", limits=WIDE)
        assert report.ok and report.canonical == text, text


def test_a_call_budget_keeps_exactly_the_workflows_within_it_in_the_same_order():
    full, twelve = workflow_space(), workflow_space(max_calls=12)
    calls = {t: count_calls(validate(t, domain="math", limits=WIDE).workflow.root) for t in full}
    assert twelve == tuple(t for t in full if calls[t] <= 12)
    assert len(twelve) == 2176 and max(calls.values()) == 16
    assert all(validate(t, domain="math").ok for t in twelve)  # the DSL's default budget: 12
