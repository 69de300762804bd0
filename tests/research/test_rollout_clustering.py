"""research/rollout_clustering.py: intraclass correlation of a rollout, and the guard's
false alarms when completions cluster by problem."""

import json
import math

import numpy as np
import pytest
from study_loader import load_study

from flowgrpo.trainer.monitoring.collapse import CollapseRule


def _rows(step, problem, n, hits, key="valid"):
    return [
        {"step": step, "problem_id": problem, key: i < hits, "fallback": False} for i in range(n)
    ]


def test_groups_by_step_counts_hits_per_problem():
    rows = _rows(1, "a", 8, 3) + _rows(1, "b", 8, 0) + _rows(2, "a", 4, 4)
    got = load_study("rollout_clustering").groups_by_step(rows, "valid")
    assert got == {1: [(8, 3), (8, 0)], 2: [(4, 4)]}


def test_icc_is_one_when_groups_are_all_or_nothing():
    icc, m = load_study("rollout_clustering").pooled_icc([[(8, 8), (8, 0)]])
    assert icc == pytest.approx(1.0) and m == 8


def test_icc_is_its_lower_bound_when_groups_are_equal():
    # MSB = 0, so icc = -MSW / ((m - 1) MSW) = -1/7 for groups of 8
    icc, _ = load_study("rollout_clustering").pooled_icc([[(8, 4), (8, 4)]])
    assert icc == pytest.approx(-1 / 7)


def test_icc_pools_sums_of_squares_over_strata():
    # by hand: SSB 4 + 0 over 2 df -> MSB 2; SSW 0 + 4 over 28 df -> MSW 1/7;
    # icc = (2 - 1/7) / (2 + 7/7) = 13/21. A stratum with one group adds nothing.
    strata = [[(8, 8), (8, 0)], [(8, 4), (8, 4)], [(8, 5)]]
    icc, _ = load_study("rollout_clustering").pooled_icc(strata)
    assert icc == pytest.approx(13 / 21)


def test_icc_is_nan_without_a_stratum_of_two_groups():
    icc, _ = load_study("rollout_clustering").pooled_icc([[(8, 5)], []])
    assert math.isnan(icc)


@pytest.mark.parametrize("icc", [0.0, 0.3])
def test_drawn_rates_have_the_design_effects_variance(icc):
    # Var(rate) = p (1 - p) (1 + (k - 1) icc) / (groups k)  (Kish's design effect)
    study = load_study("rollout_clustering")
    rng = np.random.default_rng(1)
    p, groups, k = 0.4, 2, 8
    rates = study.draw_rates(rng, p, icc, groups, k, 200000)
    want = p * (1 - p) * (1 + (k - 1) * icc) / (groups * k)
    assert rates.mean() == pytest.approx(p, abs=0.005)
    assert rates.var() == pytest.approx(want, rel=0.02)


def _exact_binomial_false_alarm(p, n, alpha, drop=0.2):
    """The default rule on validity by enumeration, written from its formula: the invalid
    rate rises by >= drop and the one-sided pooled z-test gives p <= alpha."""
    pmf = [math.comb(n, x) * p**x * (1 - p) ** (n - x) for x in range(n + 1)]
    total = 0.0
    for x1 in range(n + 1):
        for x2 in range(n + 1):
            q1, q2 = 1 - x1 / n, 1 - x2 / n
            pooled = (q1 + q2) / 2
            var = pooled * (1 - pooled) * 2 / n
            if var <= 1e-12 or q2 - q1 < drop - 1e-9:
                continue
            if 0.5 * math.erfc((q2 - q1) / math.sqrt(var) / math.sqrt(2)) <= alpha:
                total += pmf[x1] * pmf[x2]
    return total


def test_false_alarms_without_clustering_match_the_exact_binomial_rate():
    study = load_study("rollout_clustering")
    exact = _exact_binomial_false_alarm(0.4, 16, CollapseRule().alpha)  # the rule the script uses
    draws = 40000
    got = study.false_alarms(0.4, 0.0, 2, 8, draws, seed=3)
    se = math.sqrt(exact * (1 - exact) / draws)
    assert abs(got - exact) < 4 * se


def test_clustering_raises_the_false_alarm_rate():
    study = load_study("rollout_clustering")
    plain = study.false_alarms(0.4, 0.0, 2, 8, 20000, seed=4)
    clustered = study.false_alarms(0.4, 0.3, 2, 8, 20000, seed=4)
    assert clustered > 3 * plain


def test_main_prints_both_tables(tmp_path, capsys):
    rows = _rows(1, "a", 8, 8) + _rows(1, "b", 8, 0) + _rows(2, "a", 8, 4) + _rows(2, "c", 8, 4)
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert load_study("rollout_clustering").main([str(tmp_path), "--draws", "50"]) == 0
    out = capsys.readouterr().out
    assert "| all runs pooled | 2 | 32 | 0.619 |" in out  # 13/21
    assert "2 x 8 completions" in out


def test_main_refuses_a_folder_without_samples(tmp_path, capsys):
    assert load_study("rollout_clustering").main([str(tmp_path)]) == 2
    assert "samples.jsonl not found" in capsys.readouterr().out
