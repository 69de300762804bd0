"""Policy losses, aggregations and policy_objective on tiny hand-computed tensors."""

import math
import re

import pytest
import torch

from flowgrpo.trainer.algorithms.losses import (
    AGGREGATIONS,
    POLICY_LOSSES,
    available_aggregations,
    available_policy_losses,
    check_loss_names,
    get_policy_loss,
    register_aggregation,
    register_policy_loss,
)
from flowgrpo.trainer.algorithms.objective import aggregate, policy_objective
from flowgrpo.trainer.algorithms.tokens import (
    kl_k3,
    token_logprobs_and_entropy,
    top_entropy_mask,
    truncation_mask,
)
from flowgrpo.trainer.config import LossConfig

LOSSES = ("clip", "clip_cov", "gspo", "kl_cov")
CFG = LossConfig(loss_agg="token_mean")


def leaf(values):
    return torch.tensor(values, dtype=torch.float32, requires_grad=True)


def test_registries_list_the_builtins():
    assert available_policy_losses() == LOSSES
    assert available_aggregations() == (
        "seq_mean_token_mean",
        "seq_mean_token_sum_norm",
        "token_mean",
    )


# --------------------------------------------------------------------------- clip


def test_ratio_one_and_advantage_one_give_minus_one_per_valid_token():
    logp = leaf([[-1.0, -2.0, -3.0], [-0.5, -0.5, -0.5]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    loss, metrics = get_policy_loss("clip")(logp, logp.detach(), torch.ones(2), mask, CFG)
    assert torch.equal(loss, torch.tensor([[-1.0, -1.0, 0.0], [-1.0, -1.0, -1.0]]))
    assert metrics["clip_ratio/low"] == 0.0 and metrics["clip_ratio/high"] == 0.0
    assert metrics["ratio_mean"] == pytest.approx(1.0)


def test_clip_both_sides_values_gradients_and_fractions():
    # row 0 (A=+1) ratios [1.5, 0.5]; row 1 (A=-1) ratios [0.5, 1.5]; column 2 is padding
    old = torch.tensor([[-1.0, -1.0, 0.0], [-1.0, -1.0, 0.0]])
    delta = torch.tensor([[math.log(1.5), math.log(0.5), 0.0], [math.log(0.5), math.log(1.5), 0.0]])
    logp = (old + delta).detach()
    logp[:, 2] = -math.inf  # garbage at masked positions must not leak
    logp.requires_grad_(True)
    mask = torch.tensor([[True, True, False], [True, True, False]])
    loss, metrics = get_policy_loss("clip")(logp, old, torch.tensor([1.0, -1.0]), mask, CFG)
    # A=+1, r=1.5: max(-1.5, -1.28) = -1.28 (clipped high)  | A=+1, r=0.5: max(-.5, -.8) = -.5
    # A=-1, r=0.5: max(.5, .8) = .8 (clipped low)           | A=-1, r=1.5: max(1.5, 1.28) = 1.5
    expected = torch.tensor([[-1.28, -0.5, 0.0], [0.8, 1.5, 0.0]])
    assert torch.allclose(loss, expected, atol=1e-6)
    assert metrics["clip_ratio/high"] == 0.25 and metrics["clip_ratio/low"] == 0.25
    loss.sum().backward()
    # d(-A r)/dlogp = -A r where unclipped, 0 where clipped, 0 off-mask
    assert torch.allclose(logp.grad, torch.tensor([[0.0, -0.5, 0.0], [0.0, 1.5, 0.0]]))


# --------------------------------------------------------------------------- aggregation


def test_aggregations_with_a_fully_masked_row():
    loss = torch.tensor([[1.0, 2.0, 9.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]])
    cfg = LossConfig(max_new_tokens=4)
    assert aggregate("token_mean", loss, mask, cfg).item() == 1.5  # (1 + 2) / 2
    assert aggregate("seq_mean_token_mean", loss, mask, cfg).item() == 1.5  # row 1 left out
    assert aggregate("seq_mean_token_sum_norm", loss, mask, cfg).item() == 0.75  # 3 / 4


def test_aggregations_differ_as_the_papers_say():
    loss = torch.tensor([[1.0, 2.0, 9.0], [3.0, 4.0, 5.0], [7.0, 7.0, 7.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0]])
    cfg = LossConfig(max_new_tokens=4)
    assert aggregate("token_mean", loss, mask, cfg).item() == 3.0  # 15 / 5 tokens
    assert aggregate("seq_mean_token_mean", loss, mask, cfg).item() == 2.75  # (1.5 + 4) / 2
    assert aggregate("seq_mean_token_sum_norm", loss, mask, cfg).item() == 1.875  # (3/4+12/4)/2


@pytest.mark.parametrize("name", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"])
def test_all_masked_batch_gives_zero_and_finite_gradients(name):
    x = leaf([[math.nan, 1.0], [2.0, math.inf]])
    out = aggregate(name, x, torch.zeros(2, 2), LossConfig(max_new_tokens=2))
    out.backward()
    assert out.item() == 0.0 and torch.equal(x.grad, torch.zeros(2, 2))


def test_dr_grpo_normaliser_must_cover_the_longest_completion():
    with pytest.raises(
        ValueError, match=re.escape("3 valid tokens but LossConfig.max_new_tokens=2")
    ):
        aggregate(
            "seq_mean_token_sum_norm",
            torch.ones(1, 3),
            torch.ones(1, 3),
            LossConfig(max_new_tokens=2),
        )


# --------------------------------------------------------------------------- gspo


def test_gspo_sequence_ratio_clipping_and_token_gradients():
    # row 0: deltas [.1, .3] -> s = exp(.2) = 1.2214, far above 1 + 4e-4
    # row 1: deltas [0, -2e-4] (+ padding) -> s = exp(-1e-4) = 0.9999, inside [1-3e-4, 1+4e-4]
    old = torch.zeros(2, 3)
    logp = leaf([[0.1, 0.3, 0.0], [0.0, -2e-4, 5.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    fn = get_policy_loss("gspo")
    s0, s1 = math.exp(0.2), math.exp(-1e-4)

    loss, metrics = fn(logp, old, torch.tensor([1.0, 1.0]), mask, CFG)
    # A=+1: row 0 clipped at 1 + 4e-4 on every token; row 1 unclipped: -s1 on every token
    assert torch.allclose(loss, torch.tensor([[-1.0004, -1.0004, 0], [-s1, -s1, 0]]), atol=1e-6)
    assert metrics["clip_ratio/high"] == 0.5 and metrics["clip_ratio/low"] == 0.0
    assert metrics["seq_ratio_mean"] == pytest.approx((s0 + s1) / 2, rel=1e-5)
    loss.sum().backward()
    # GSPO-token: d/dlogp_t of sg[s] * exp(logp_t - sg[logp_t]) = s, times -A
    assert torch.allclose(logp.grad, torch.tensor([[0.0, 0.0, 0.0], [-s1, -s1, 0.0]]))

    logp.grad = None
    loss, _ = fn(logp, old, torch.tensor([-1.0, 0.0]), mask, CFG)
    loss.sum().backward()  # A=-1 with s > 1 is not clipped: every token gets -A * s0
    assert torch.allclose(logp.grad[0], torch.tensor([s0, s0, 0.0]))


# --------------------------------------------------------------------------- clip_cov, kl_cov

# logp [[-0.5, -3.5], [-1, -3]], mean -2; A = [+1, -1], token mean 0
# cov = (logp + 2) * A = [[1.5, -1.5], [-1, 1]]; only (0, 0) lies strictly inside (1, 5)
COV_LOGP = [[-0.5, -3.5], [-1.0, -3.0]]


def test_clip_cov_detaches_the_in_band_token():
    logp = leaf(COV_LOGP)
    cfg = LossConfig(policy_loss="clip_cov", loss_agg="token_mean", clip_cov_ratio=0.25)
    loss, metrics = get_policy_loss("clip_cov")(
        logp, logp.detach(), torch.tensor([1.0, -1.0]), torch.ones(2, 2), cfg
    )
    assert torch.equal(loss.detach(), torch.tensor([[-1.0, -1.0], [1.0, 1.0]]))  # value kept
    loss.sum().backward()
    assert torch.equal(logp.grad, torch.tensor([[0.0, -1.0], [1.0, 1.0]]))
    assert metrics["clip_cov/frac_selected"] == 0.25


def test_clip_cov_picks_a_seeded_random_subset_of_the_band():
    torch.manual_seed(0)
    logp_NT = torch.randn(4, 8) * 2
    adv_N = torch.tensor([2.0, -2.0, 1.0, -1.0])
    mask = torch.ones(4, 8, dtype=torch.bool)
    mask[3, 5:] = False
    # independent covariance: centred over the 29 valid tokens
    a_NT = adv_N[:, None].expand(4, 8)
    cov = (logp_NT - logp_NT[mask].mean()) * (a_NT - a_NT[mask].mean())
    band = mask & (cov > 1) & (cov < 5)
    assert band.sum() > 3
    cfg = LossConfig(policy_loss="clip_cov", loss_agg="token_mean", clip_cov_ratio=0.1)

    def selected(seed):
        torch.manual_seed(seed)
        logp = logp_NT.clone().requires_grad_(True)
        loss, _ = get_policy_loss("clip_cov")(logp, logp.detach(), adv_N, mask, cfg)
        loss.sum().backward()
        return (logp.grad == 0) & mask

    sel = selected(1)
    assert sel.sum() == int(0.1 * 29) == 2  # max(1, int(ratio * n_valid))
    assert not (sel & ~band).any()
    assert torch.equal(sel, selected(1))


def test_kl_cov_penalises_the_top_covariance_token():
    logp = leaf(COV_LOGP)
    old = logp.detach() - 0.1  # every ratio e^0.1, |logp - old| = 0.1
    cfg = LossConfig(policy_loss="kl_cov", loss_agg="token_mean", kl_cov_ratio=0.25)
    loss, metrics = get_policy_loss("kl_cov")(
        logp, old, torch.tensor([1.0, -1.0]), torch.ones(2, 2), cfg
    )
    r = math.exp(0.1)
    # top-1 by cov is (0, 0): -A r + 1 * 0.1; the rest -A r (no clipping in KL-Cov)
    assert torch.allclose(loss, torch.tensor([[-r + 0.1, -r], [r, r]]))
    loss.sum().backward()
    assert torch.allclose(logp.grad, torch.tensor([[-r + 1.0, -r], [r, r]]))
    assert metrics["kl_cov/frac_selected"] == 0.25
    assert metrics["kl_cov/abs_kl_mean"] == pytest.approx(0.1)


@pytest.mark.parametrize("name", LOSSES)
def test_masked_garbage_never_reaches_loss_or_gradient(name):
    logp = torch.tensor([[-1.0, math.nan], [-math.inf, -math.inf]], requires_grad=True)
    old = torch.tensor([[-1.2, math.inf], [math.nan, -math.inf]])
    mask = torch.tensor([[1, 0], [0, 0]])
    adv = torch.tensor([1.0, math.nan])  # a fully masked row may carry any advantage
    cfg = LossConfig(policy_loss=name, loss_agg="token_mean", clip_cov_ratio=1.0)
    loss, metrics = get_policy_loss(name)(logp, old, adv, mask, cfg)
    loss.sum().backward()
    assert torch.isfinite(loss).all() and torch.isfinite(logp.grad).all()
    assert loss[0, 1] == 0 and (loss[1] == 0).all() and (logp.grad[:, 1] == 0).all()
    assert all(math.isfinite(v) for v in metrics.values())


# --------------------------------------------------------------------------- KL, masks


def test_k3_kl_is_zero_at_equality_and_matches_hand_value():
    logp = torch.tensor([[-1.0, -2.0]])
    assert torch.equal(kl_k3(logp, logp), torch.zeros(1, 2))
    # d = ref - logp = log 2: 2 - log 2 - 1 = 0.30685
    kl = kl_k3(torch.tensor([math.log(0.25)]), torch.tensor([math.log(0.5)]))
    assert kl.item() == pytest.approx(1 - math.log(2))


def test_top_entropy_mask_keeps_the_top_fraction_of_valid_tokens():
    entropy = torch.tensor([[0.1, 0.5, 0.9], [0.3, 2.0, 99.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])  # 99.0 is padding
    # 5 valid tokens, top 40 % -> ceil(2.0) = 2 tokens: 2.0 and 0.9
    out = top_entropy_mask(entropy, mask, 0.4)
    assert out.tolist() == [[False, False, True], [False, True, False]]
    assert top_entropy_mask(entropy, mask, 0.2).sum() == 1  # ceil(1.0)
    assert top_entropy_mask(entropy, torch.zeros(2, 3), 0.2).sum() == 0


def test_truncation_mask_zeroes_flagged_rows_and_keeps_dtype():
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    out = truncation_mask(mask, torch.tensor([False, True]))
    assert out.dtype == mask.dtype and out.tolist() == [[1, 1, 0], [0, 0, 0]]
    assert truncation_mask(mask.bool(), [True, False]).tolist() == [[0, 0, 0], [1, 1, 1]]


# --------------------------------------------------------------------------- policy_objective


def test_objective_sums_policy_kl_and_entropy_terms_by_hand():
    logp = leaf([[-1.0, -2.0], [-3.0, -9.0]])
    ref = torch.tensor([[-1.0 + math.log(2), -2.0], [-3.0, -9.0]])
    entropy = leaf([[1.0, 2.0], [3.0, 7.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    cfg = LossConfig(loss_agg="token_mean", beta=0.5, entropy_coef=0.1)
    total, m = policy_objective(
        logp,
        logp.detach(),
        torch.tensor([1.0, -1.0]),
        mask,
        cfg,
        ref_logp_NT=ref,
        entropy_NT=entropy,
    )
    # policy: (-1 - 1 + 1) / 3 = -1/3; kl: (1 - log 2) / 3; entropy: (1 + 2 + 3) / 3 = 2
    kl = (1 - math.log(2)) / 3
    assert total.item() == pytest.approx(-1 / 3 + 0.5 * kl - 0.1 * 2, rel=1e-6)
    assert m["loss/policy"] == pytest.approx(-1 / 3) and m["kl"] == pytest.approx(kl)
    assert m["entropy"] == pytest.approx(2.0)
    # logp {-1, -2, -3}: mean -2; A {1, 1, -1}: mean 1/3 -> (2/3 + 0 + 4/3) / 3 = 2/3
    assert m["cov_logp_adv"] == pytest.approx(2 / 3)


def test_objective_requires_the_inputs_its_terms_need():
    logp = torch.zeros(1, 2)
    args = (logp, logp, torch.ones(1), torch.ones(1, 2))
    with pytest.raises(ValueError, match=re.escape("beta=0.1 > 0 needs ref_logp_NT")):
        policy_objective(*args, LossConfig(loss_agg="token_mean", beta=0.1))
    with pytest.raises(ValueError, match=re.escape("entropy_coef=0.1 needs entropy_NT")):
        policy_objective(*args, LossConfig(loss_agg="token_mean", entropy_coef=0.1))
    with pytest.raises(ValueError, match="top_entropy_frac is set: pass entropy_NT"):
        policy_objective(*args, LossConfig(loss_agg="token_mean", top_entropy_frac=0.2))
    with pytest.raises(ValueError, match="needs truncated_N"):
        policy_objective(*args, LossConfig(loss_agg="token_mean", mask_truncated=True))
    with pytest.raises(ValueError, match=r"adv_N must be \[N\]"):
        policy_objective(logp, logp, torch.ones(2), torch.ones(1, 2), CFG)


def test_objective_masks_truncated_rows_and_low_entropy_tokens():
    logp = leaf([[-1.0, -2.0, -3.0], [-1.0, -1.0, -1.0]])
    entropy = torch.tensor([[0.1, 3.0, 0.2], [5.0, 5.0, 5.0]])
    cfg = LossConfig(loss_agg="token_mean", top_entropy_frac=0.34, mask_truncated=True)
    total, m = policy_objective(
        logp,
        logp.detach(),
        torch.ones(2),
        torch.ones(2, 3),
        cfg,
        entropy_NT=entropy,
        truncated_N=torch.tensor([False, True]),
    )
    total.backward()
    # row 1 truncated; of row 0's 3 tokens the top ceil(0.34 * 3) = 2 by entropy: 3.0 and 0.2;
    # token_mean over the 3 valid tokens: -(1 + 1) / 3, gradient -1/3 on the two chosen
    assert total.item() == pytest.approx(-2 / 3)
    assert torch.allclose(logp.grad, torch.tensor([[0.0, -1 / 3, -1 / 3], [0.0, 0.0, 0.0]]))
    assert m["frac_pg_tokens"] == pytest.approx(2 / 3)


def test_a_step_on_positive_advantage_raises_the_sampled_tokens_logprob():
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 5)
    x, targets = torch.randn(2, 3, 4), torch.randint(0, 5, (2, 3))
    logp0, _ = token_logprobs_and_entropy(lin(x), targets)
    total, _ = policy_objective(
        logp0,
        logp0.detach(),
        torch.tensor([1.0, -1.0]),
        torch.ones(2, 3),
        LossConfig(max_new_tokens=3),
    )
    total.backward()
    torch.optim.SGD(lin.parameters(), lr=0.5).step()
    with torch.no_grad():
        logp1, _ = token_logprobs_and_entropy(lin(x), targets)
    assert logp1[0].sum() > logp0[0].sum() and logp1[1].sum() < logp0[1].sum()


@pytest.mark.parametrize(
    ("coef", "optim"), [(0.1, "sgd"), (-0.1, "sgd"), (0.1, "adam"), (-0.1, "adam")]
)
def test_entropy_bonus_step_raises_entropy_and_a_negative_one_lowers_it(coef, optim):
    """THE sign test: zero advantages, so only the entropy term moves the policy."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 5)
    x, targets = torch.randn(2, 3, 4), torch.randint(0, 5, (2, 3))
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])

    def mean_entropy():
        with torch.no_grad():
            return token_logprobs_and_entropy(lin(x), targets)[1][mask.bool()].mean().item()

    before = mean_entropy()
    logp, entropy = token_logprobs_and_entropy(lin(x), targets)
    cfg = LossConfig(max_new_tokens=3, entropy_coef=coef)
    total, _ = policy_objective(logp, logp.detach(), torch.zeros(2), mask, cfg, entropy_NT=entropy)
    total.backward()
    if optim == "sgd":
        torch.optim.SGD(lin.parameters(), lr=1.0).step()
    else:
        torch.optim.Adam(lin.parameters(), lr=0.05).step()
    after = mean_entropy()
    assert (after > before) if coef > 0 else (after < before), (before, after)


# --------------------------------------------------------------------------- logprobs, entropy


def test_token_logprobs_and_entropy_match_a_direct_computation():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 7, dtype=torch.float64).to(torch.bfloat16)
    targets = torch.randint(0, 7, (2, 3))
    logp, entropy = token_logprobs_and_entropy(logits, targets)
    probs = torch.softmax(logits.float(), -1)
    direct_logp = probs.gather(-1, targets[..., None]).squeeze(-1).log()
    direct_entropy = torch.distributions.Categorical(probs=probs).entropy()
    assert logp.dtype == entropy.dtype == torch.float32
    assert torch.allclose(logp, direct_logp, atol=1e-5)
    assert torch.allclose(entropy, direct_entropy, atol=1e-5)


def test_minus_inf_logits_give_finite_entropy_and_gradients():
    logits = torch.tensor([[[0.0, 0.0, -math.inf, -math.inf]]], requires_grad=True)
    logp, entropy = token_logprobs_and_entropy(logits, torch.tensor([[1]]))
    assert logp.item() == pytest.approx(-math.log(2)) and entropy.item() == pytest.approx(
        math.log(2)
    )
    (logp + entropy).sum().backward()
    assert torch.isfinite(logits.grad).all()


# --------------------------------------------------------------------------- config, registry


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"policy_loss": "ppo2"}, "algorithm.loss.policy_loss: unknown policy loss 'ppo2'"),
        ({"loss_agg": "sum"}, "algorithm.loss.loss_agg: unknown loss aggregation 'sum'"),
        ({"max_new_tokens": 0}, "algorithm.loss.max_new_tokens: got 0"),
        ({"epsilon_low": 1.0}, "algorithm.loss.epsilon_low: got 1.0"),
        ({"epsilon_high": -0.1}, "algorithm.loss.epsilon_high: got -0.1"),
        ({"clip_cov_ratio": 0.0}, "algorithm.loss.clip_cov_ratio: got 0.0"),
        ({"clip_cov_lb": 5.0}, "algorithm.loss.clip_cov_lb: 5.0 must be below clip_cov_ub"),
        ({"beta": -1.0}, "algorithm.loss.beta: got -1.0"),
        ({"entropy_coef": math.nan}, "algorithm.loss.entropy_coef: got nan"),
        ({"top_entropy_frac": 1.5}, "algorithm.loss.top_entropy_frac: got 1.5"),
        ({"mask_truncated": "yes"}, "algorithm.loss.mask_truncated: got 'yes'"),
    ],
)
def test_config_errors_name_the_field(kwargs, message):
    base = {"loss_agg": "token_mean"}
    with pytest.raises(ValueError, match=re.escape(message)):
        check_loss_names(LossConfig(**{**base, **kwargs}))  # names: when a run is built


def test_config_defaults_are_dapo_clip_higher_and_dr_grpo_aggregation():
    cfg = LossConfig(max_new_tokens=64)
    assert (cfg.policy_loss, cfg.loss_agg) == ("clip", "seq_mean_token_sum_norm")
    assert (cfg.epsilon_low, cfg.epsilon_high) == (0.2, 0.28)
    assert (cfg.gspo_epsilon_low, cfg.gspo_epsilon_high) == (3e-4, 4e-4)
    assert (cfg.beta, cfg.entropy_coef, cfg.top_entropy_frac) == (0.0, 0.0, None)


@pytest.fixture
def scratch_registries():
    """Registries restored after the test (custom entries removed)."""
    before = {r: set(r.names()) for r in (POLICY_LOSSES, AGGREGATIONS)}
    yield
    for registry, names in before.items():
        for name in set(registry.names()) - names:
            registry.unregister(name)


def test_registries_reject_duplicates_and_route_custom_entries(scratch_registries):
    with pytest.raises(ValueError, match="policy loss 'clip' is already registered"):
        register_policy_loss("clip")(lambda *a, **k: None)
    with pytest.raises(ValueError, match="aggregation 'token_mean' is already registered"):
        register_aggregation("token_mean")(lambda *a: None)

    @register_aggregation("total_sum")
    def total_sum(loss_NT, mask_NT, config):
        return (loss_NT * mask_NT).sum(), 1.0

    assert aggregate("total_sum", torch.ones(2, 2), torch.ones(2, 2), CFG).item() == 4.0
    with pytest.raises(ValueError, match="unknown loss aggregation 'nope'; choose one of"):
        aggregate("nope", torch.ones(1, 1), torch.ones(1, 1), CFG)
    with pytest.raises(ValueError, match="unknown policy loss 'nope'; choose one of: clip"):
        get_policy_loss("nope")
