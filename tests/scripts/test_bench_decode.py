"""scripts/bench_decode.py times both loops on the same tokens and stops where they differ."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from script_loader import load_script

from flowgrpo.operators.models import build_tiny_model

ARGS = dict(adapter=None, problems=2, k=2, tokens=6, temperature=1.0, calls=2, rounds=1)


def tiny_policy(adapter):
    return build_tiny_model(seed=4)


def test_both_loops_are_timed_on_the_same_tokens(monkeypatch):
    bench = load_script("bench_decode")
    monkeypatch.setattr(bench, "policy", tiny_policy)
    times, idle = bench.bench(SimpleNamespace(**ARGS))
    assert set(times) == {"generate", "decode"}
    assert all(len(t) == 1 and t[0] > 0 for t in times.values())  # the warm-up round not kept
    assert len(idle) == 4 and all(0.0 <= x < 1.0 for x in idle)


def test_a_loop_that_writes_other_tokens_stops_the_benchmark(monkeypatch):
    bench = load_script("bench_decode")
    monkeypatch.setattr(bench, "policy", tiny_policy)
    real = bench.generate_rollout

    def one_token_off(*args, drop_ended, **kwargs):
        rollout = real(*args, drop_ended=drop_ended, **kwargs)
        if drop_ended:
            rollout.completion_ids_NT[-1, 0] += 1
        return rollout

    monkeypatch.setattr(bench, "generate_rollout", one_token_off)
    with pytest.raises(SystemExit, match="wrote other tokens"):
        bench.bench(SimpleNamespace(**ARGS))
