"""Advantage estimators on tiny hand-computed tensors (arithmetic in the comments)."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import flowgrpo.trainer.algorithms.advantages as adv_mod
from flowgrpo.rewards import weighted_sum
from flowgrpo.trainer.algorithms.advantages import (
    adv_frac_extreme,
    available_estimators,
    compute_advantages,
    group_stats,
    register_estimator,
)

NAN = math.nan
ALL = ("dr_grpo", "gdpo", "global", "grpo", "rloo")
SQRT2, SQRT3 = math.sqrt(2.0), math.sqrt(3.0)


def t(*values):
    return torch.tensor(values, dtype=torch.float64)


def close(actual, expected, atol=1e-5):
    expected = torch.as_tensor(expected, dtype=torch.float32)
    assert actual.dtype == torch.float32
    assert torch.allclose(actual, expected, atol=atol), f"{actual.tolist()} != {expected.tolist()}"


def test_registry_lists_the_five_builtin_estimators():
    assert available_estimators() == ALL


# --------------------------------------------------------------------------- grpo


def test_grpo_one_success_in_four():
    # mean = 1/4; deviations 3/4, -1/4 x3; sum of squares 9/16 + 3/16 = 3/4;
    # unbiased var = (3/4) / 3 = 1/4 -> std 1/2; A = dev / (1/2) = [1.5, -0.5, -0.5, -0.5]
    close(compute_advantages("grpo", t(1, 0, 0, 0), 4), [1.5, -0.5, -0.5, -0.5])
    close(compute_advantages("grpo", t(1, 0, 0, 0), 4, eps=0.0), [1.5, -0.5, -0.5, -0.5], 1e-7)


def test_grpo_k2_gives_plus_minus_0707_whatever_the_gap():
    # K=2: r - mean = ±d/2, unbiased std = |d|/sqrt(2) -> ±1/sqrt(2), for d = 1 and d = 0.8
    a = compute_advantages("grpo", t(1.0, 0.0, 0.2, 1.0), 2)
    close(a, [1 / SQRT2, -1 / SQRT2, -1 / SQRT2, 1 / SQRT2])


def test_grpo_nan_sample_gets_zero_and_is_left_out_of_the_group_stats():
    # scorable [1, 0, 0]: mean 1/3; deviations 2/3, -1/3, -1/3; sum of squares 6/9;
    # unbiased var (6/9) / 2 = 1/3 -> std 1/sqrt(3); A = dev * sqrt(3)
    a = compute_advantages("grpo", t(1, 0, NAN, 0), 4)
    close(a, [2 / 3 * SQRT3, -1 / 3 * SQRT3, 0.0, -1 / 3 * SQRT3])
    assert a[2].item() == 0.0


def test_grpo_weights_combine_components_before_normalising():
    # weights (2, 1): combined [2, 1, 0, 3]; mean 1.5; dev [.5, -.5, -1.5, 1.5];
    # sum of squares 5; unbiased var 5/3
    rewards = t(1, 0, 0, 1, 0, 0, 1, 1).view(4, 2)
    std = math.sqrt(5 / 3)
    expected = [0.5 / std, -0.5 / std, -1.5 / std, 1.5 / std]
    close(compute_advantages("grpo", rewards, 4, weights=[2.0, 1.0]), expected)
    close(compute_advantages("grpo", rewards, 4, weights=torch.tensor([2.0, 1.0])), expected)


def test_partially_nan_components_are_skipped_not_counted():
    # combined: 2*1 + (skip) = 2 ; (skip) + (skip) = NaN ; 2*0.5 + 3*2 = 7
    c = weighted_sum(t(1, NAN, NAN, NAN, 0.5, 2).view(3, 2), [2.0, 3.0])
    assert c[0].item() == 2.0 and math.isnan(c[1].item()) and c[2].item() == 7.0


# --------------------------------------------------------------------------- exact zeros


@pytest.mark.parametrize("name", ALL)
def test_constant_group_is_exactly_zero_next_to_a_varying_group(name):
    # 0.1 + 0.2 = 0.30000000000000004 in every sample of group 2: constant, so exactly 0
    rewards = t(1, 0, 0, 0, 0, 0, 0, 0, 0.1, 0.2, 0.1, 0.2, 0.1, 0.2, 0.1, 0.2).view(8, 2)
    a = compute_advantages(name, rewards, 4)
    assert torch.equal(a[4:], torch.zeros(4))
    assert (a[:4] != 0).all()


@pytest.mark.parametrize("name", ALL)
def test_all_equal_batch_is_exactly_zero(name):
    assert torch.equal(compute_advantages(name, torch.full((8,), 0.3), 4), torch.zeros(8))


@pytest.mark.parametrize("name", ALL)
def test_group_of_one_is_zero(name):
    assert torch.equal(compute_advantages(name, t(1, 0, 5), 1), torch.zeros(3))


@pytest.mark.parametrize("name", ALL)
def test_all_nan_group_and_single_scorable_group_are_zero(name):
    rewards = t(NAN, NAN, NAN, NAN, 1, NAN, NAN, NAN, 1, 0, 0, 0)
    a = compute_advantages(name, rewards, 4)
    assert torch.equal(a[:8], torch.zeros(8))
    assert a[8] > 0 and (a[9:] < 0).all()


@pytest.mark.parametrize("name", ALL)
def test_unscorable_sample_is_zero_with_several_components(name):
    rewards = t(1, 1, NAN, NAN, 0, 1, 0, 0).view(4, 2)
    a = compute_advantages(name, rewards, 4)
    assert a[1].item() == 0.0 and torch.isfinite(a).all()


# --------------------------------------------------------------------------- other estimators


def test_dr_grpo_subtracts_the_mean_only():
    close(compute_advantages("dr_grpo", t(1, 0, 0, 0), 4), [0.75, -0.25, -0.25, -0.25])
    # scorable [1, 0, 0]: mean 1/3
    close(compute_advantages("dr_grpo", t(1, 0, NAN, 0), 4), [2 / 3, -1 / 3, 0, -1 / 3])


def test_rloo_subtracts_the_mean_of_the_others():
    # 1 - mean(0, 0, 0) = 1 ; 0 - mean(1, 0, 0) = -1/3
    close(compute_advantages("rloo", t(1, 0, 0, 0), 4), [1, -1 / 3, -1 / 3, -1 / 3])
    # NaN left out: 1 - mean(0, 0) = 1 ; 0 - mean(1, 0) = -1/2
    close(compute_advantages("rloo", t(1, 0, NAN, 0), 4), [1, -0.5, 0, -0.5])


def test_global_divides_group_centred_rewards_by_the_batch_std():
    # centred: [.75, -.25, -.25, -.25, 0, 0, 0, 0]; batch mean 0; sum of squares 3/4;
    # unbiased var (3/4) / 7 -> std sqrt(3/28)
    a = compute_advantages("global", t(1, 0, 0, 0, 2, 2, 2, 2), 4)
    std = math.sqrt(3 / 28)
    close(a, [0.75 / std, -0.25 / std, -0.25 / std, -0.25 / std, 0, 0, 0, 0])


def test_global_keeps_the_scale_difference_between_groups_that_grpo_erases():
    # centred [.5, -.5, 5, -5]: sum of squares 50.5, unbiased var 50.5/3
    std = math.sqrt(50.5 / 3)
    close(
        compute_advantages("global", t(1, 0, 10, 0), 2), [0.5 / std, -0.5 / std, 5 / std, -5 / std]
    )
    close(compute_advantages("grpo", t(1, 0, 10, 0), 2), [1 / SQRT2, -1 / SQRT2] * 2)


def test_gdpo_one_component_varies_the_other_is_constant():
    # A: [1,0,0,0] -> z = [1.5, -.5, -.5, -.5] (as grpo); B constant -> z = 0
    # s = [1.5, -.5, -.5, -.5]: batch mean 0, sum of squares 3, unbiased var 1 -> A = s
    rewards = t(1, 0.5, 0, 0.5, 0, 0.5, 0, 0.5).view(4, 2)
    close(compute_advantages("gdpo", rewards, 4), [1.5, -0.5, -0.5, -0.5])


def test_gdpo_keeps_which_component_differed_where_grpo_ties():
    # A = [1,0,0,0] (rare success, favours sample 1), B = [0,1,1,0] (favours 2 and 3).
    # grpo: sums [1,1,1,0] -> samples 1, 2, 3 tie at +0.5, sample 4 at -1.5.
    rewards = t(1, 0, 0, 1, 0, 1, 0, 0).view(4, 2)
    close(compute_advantages("grpo", rewards, 4), [0.5, 0.5, 0.5, -1.5])
    # gdpo: zA = [1.5, -.5, -.5, -.5]; zB: mean .5, unbiased std 1/sqrt(3) -> ±sqrt(3)/2
    h = SQRT3 / 2
    s = [1.5 - h, -0.5 + h, -0.5 + h, -0.5 - h]  # [.634, .366, .366, -1.366], mean 0
    std = math.sqrt(sum(v * v for v in s) / 3)
    a = compute_advantages("gdpo", rewards, 4)
    close(a, [v / std for v in s])
    assert a[0] > a[1] == a[2] > a[3]  # the rarer success counts more


def test_gdpo_group_with_every_component_constant_is_exactly_zero():
    rewards = t(1, 0, 0, 1, 0, 1, 0, 0, 0.7, 0.2, 0.7, 0.2, 0.7, 0.2, 0.7, 0.2).view(8, 2)
    a = compute_advantages("gdpo", rewards, 4)
    assert torch.equal(a[4:], torch.zeros(4)) and (a[:4] != 0).all()


def test_gdpo_component_missing_in_one_sample_is_skipped_for_it():
    # A = [1, NaN, 0, 0]: present [1, 0, 0] -> z = sqrt(3) * [2/3, -, -1/3, -1/3];
    # B = [0, 1, 0, 0] -> z = [-.5, 1.5, -.5, -.5]; s = zA + zB (sample 2: zB only)
    rewards = t(1, 0, NAN, 1, 0, 0, 0, 0).view(4, 2)
    s = [2 / 3 * SQRT3 - 0.5, 1.5, -SQRT3 / 3 - 0.5, -SQRT3 / 3 - 0.5]
    mean = sum(s) / 4
    std = math.sqrt(sum((v - mean) ** 2 for v in s) / 3)
    close(compute_advantages("gdpo", rewards, 4), [(v - mean) / std for v in s])


# --------------------------------------------------------------------------- errors, registry


def test_unknown_name_lists_the_choices():
    with pytest.raises(ValueError, match="unknown advantage estimator 'ppo'") as e:
        compute_advantages("ppo", t(1, 0), 2)
    assert all(name in str(e.value) for name in ALL)


def test_n_not_divisible_by_group_size_is_a_clear_error():
    with pytest.raises(ValueError, match=r"5 samples do not split into groups of group_size=2"):
        compute_advantages("grpo", t(1, 0, 0, 1, 1), 2)


@pytest.mark.parametrize(
    ("rewards", "kwargs", "message"),
    [
        (torch.zeros(2, 2, 2), {}, "must be \\[N\\] or \\[N, C\\]"),
        (torch.tensor([1.0, math.inf]), {}, "±inf"),
        (torch.zeros(2, 2), {"weights": [1.0]}, "weights has 1 entries"),
        (torch.zeros(2), {"weights": [math.nan]}, "weights must be finite"),
        (torch.zeros(2), {"eps": -1.0}, "eps must be"),
    ],
)
def test_bad_input_is_rejected_with_a_message(rewards, kwargs, message):
    with pytest.raises(ValueError, match=message):
        compute_advantages("grpo", rewards, 2, **kwargs)


def test_group_size_must_be_a_positive_int():
    for bad in (0, -2, 2.0, True):
        with pytest.raises(ValueError, match="group_size must be a positive int"):
            compute_advantages("grpo", t(1, 0), bad)


def test_registry_duplicates_raise_and_custom_estimators_go_through_it():
    with pytest.raises(ValueError, match=r"'grpo' is already registered .*unregister it first"):
        register_estimator("grpo")(lambda r, k, w, e: r[:, 0])

    @register_estimator("first_component")
    def first(rewards_NC, group_size, weights_C, eps):
        return rewards_NC[:, 0] * 2

    try:
        assert "first_component" in available_estimators()
        close(compute_advantages("first_component", t(1, 3), 1), [2, 6])
    finally:
        adv_mod.ESTIMATORS.unregister("first_component")

    @register_estimator("broken")
    def broken(rewards_NC, group_size, weights_C, eps):
        return rewards_NC[:, 0] / 0

    try:  # unregistered after, or the registry test that runs next in this process fails
        with pytest.raises(ValueError, match="non-finite"):
            compute_advantages("broken", t(1, 3), 1)
    finally:
        adv_mod.ESTIMATORS.unregister("broken")


# --------------------------------------------------------------------------- diagnostics


def test_group_stats_zero_std_share_and_mean_within_group_std():
    # groups [1,0] std 1/sqrt(2); [3,3] constant; [NaN,2] one scorable; [5,5] constant
    s = group_stats(t(1, 0, 3, 3, NAN, 2, 5, 5), 2)
    assert s["zero_std_mask_G"].tolist() == [False, True, True, True]
    assert s["frac_zero_std"] == 0.75
    # mean over the groups with >= 2 scorable samples: (1/sqrt(2) + 0 + 0) / 3
    assert s["reward_std"] == pytest.approx(1 / SQRT2 / 3)
    assert s["frac_unscorable"] == 1 / 8


def test_group_stats_all_nan_batch_has_no_spread():
    s = group_stats(t(NAN, NAN), 2)
    assert s["frac_zero_std"] == 1.0 and s["reward_std"] == 0.0


def test_adv_frac_extreme_and_the_k2_signature():
    a = compute_advantages("grpo", t(1, 0, 0.2, 1.0, 1, 1), 2)  # ±0.7071 twice, then 0, 0
    assert adv_frac_extreme(a) == 0.0  # unbiased std: 0.7071 < 0.99
    assert adv_frac_extreme(a, threshold=0.7) == pytest.approx(4 / 6)
    assert adv_frac_extreme(torch.tensor([1.0, -0.995, 0.5, 0.0])) == 0.5
    assert adv_frac_extreme(torch.zeros(0)) == 0.0


# --------------------------------------------------------------------------- properties


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 4),
    st.integers(1, 5),
    st.data(),
)
def test_properties_finite_centred_and_flat_groups_zero(n_groups, k, data):
    values = st.one_of(st.just(NAN), st.sampled_from([0.0, 0.1, 0.2, 0.5, 1.0]))
    rewards = torch.tensor(
        data.draw(st.lists(values, min_size=n_groups * k, max_size=n_groups * k)),
        dtype=torch.float64,
    )
    flat = group_stats(rewards, k)["zero_std_mask_G"]
    for name in ALL:
        a = compute_advantages(name, rewards, k).view(n_groups, k).double()
        assert torch.isfinite(a).all()
        assert torch.equal(a[flat], torch.zeros_like(a[flat]))
        assert torch.equal(
            a[torch.isnan(rewards.view(n_groups, k))],
            torch.zeros(int(torch.isnan(rewards).sum()), dtype=torch.float64),
        )
        if name in ("grpo", "dr_grpo", "rloo"):
            assert torch.allclose(a.sum(1), torch.zeros(n_groups, dtype=torch.float64), atol=1e-5)
