"""Shared-prompt scoring equals the full forward: log-probs, entropies and LoRA gradients."""

from types import SimpleNamespace

import pytest
import torch

from flowgrpo.operators.models import build_tiny_model
from flowgrpo.trainer.algorithms import logprobs
from flowgrpo.trainer.algorithms.logprobs import (
    allowed_columns,
    common_prefix_length,
    group_logprobs,
    head_columns,
    prompt_prefix,
    used_width,
)
from flowgrpo.trainer.loop.policy import wrap_lora


@pytest.fixture
def policy():
    model, tok = build_tiny_model(seed=2)
    lora = SimpleNamespace(
        r=4, alpha=8, dropout=0.0, target_modules=("q_proj", "k_proj", "v_proj", "o_proj")
    )
    peft = wrap_lora(model, lora)
    torch.manual_seed(0)
    for name, p in peft.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.2)
    prompt = torch.tensor(tok("<|user|>Tom has 3 apples.\n<|assistant|>")["input_ids"])
    completions = torch.randint(4, 90, (4, 7))
    mask = torch.ones(4, 7)
    mask[1, 4:] = 0
    mask[3, 1:] = 0  # a completion of one token
    return peft, prompt, completions, mask


def _run(model, prompt, completions, mask, mode):
    model.zero_grad()
    logp, entropy = group_logprobs(model, prompt, completions, mask, mode)
    ((logp * mask).sum() + (entropy * mask).sum()).backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad])
    return logp.detach(), entropy.detach(), grads


def test_shared_prompt_matches_the_full_forward(policy):
    model, prompt, completions, mask = policy
    lp_s, ent_s, g_s = _run(model, prompt, completions, mask, "shared_prompt")
    lp_f, ent_f, g_f = _run(model, prompt, completions, mask, "full")
    assert torch.allclose(lp_s * mask, lp_f * mask, atol=1e-5)
    assert torch.allclose(ent_s * mask, ent_f * mask, atol=1e-5)
    assert (g_s - g_f).norm() / g_f.norm() < 1e-4
    assert g_f.norm() > 0


def _by_hand(model, prompt, completions, mask):
    """logp and entropy of each row from its own plain forward over prompt + its scored tokens
    (no cache, no padding, no trimming): the reference the scorer must match."""
    logp, entropy = torch.zeros(completions.shape), torch.zeros(completions.shape)
    for i in range(len(completions)):
        n = int(mask[i].sum())
        ids = torch.cat([prompt, completions[i, :n]])[None]
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1]
        log_pi = torch.log_softmax(logits, dim=-1)
        logp[i, :n] = log_pi.gather(1, completions[i, :n, None])[:, 0]
        entropy[i, :n] = -(log_pi.exp() * log_pi).sum(-1)
    return logp, entropy


@pytest.mark.parametrize("mode", ["shared_prompt", "full"])
def test_trailing_padding_columns_change_neither_scores_nor_gradient(policy, mode):
    """A group sampled beside longer rows carries their padding: the scorer runs only its own
    width, and scores and LoRA gradient equal each row's own forward (computed by hand)."""
    model, prompt, completions, mask = policy
    wide = torch.cat([completions, torch.full((4, 9), 3)], dim=1)  # 9 pad columns
    wide_mask = torch.cat([mask, torch.zeros(4, 9)], dim=1)
    lp, ent, grads = _run(model, prompt, wide, wide_mask, mode)
    model.zero_grad()
    ref_lp, ref_ent = _by_hand(model, prompt, completions, mask)
    ((ref_lp * mask).sum() + (ref_ent * mask).sum()).backward()
    ref_grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad])
    assert lp.shape == wide.shape and (lp[:, 7:] == 0).all() and (ent[:, 7:] == 0).all()
    assert torch.allclose(lp[:, :7] * mask, ref_lp * mask, atol=1e-5)
    assert torch.allclose(ent[:, :7] * mask, ref_ent * mask, atol=1e-5)
    assert (grads - ref_grads).norm() / ref_grads.norm() < 1e-4


def test_used_width_is_the_last_scored_column():
    mask = torch.tensor([[1.0, 1, 0, 0, 0], [1, 1, 1, 0, 0]])
    assert used_width(mask) == 3
    assert used_width(torch.zeros(2, 5)) == 1  # fully masked rows: one column, nothing scored
    assert used_width(torch.ones(1, 4)) == 4


def test_log_probs_are_normalised_and_entropy_non_negative(policy):
    model, prompt, completions, mask = policy
    with torch.no_grad():
        logp, entropy = group_logprobs(model, prompt, completions, mask)
    assert (logp <= 0).all() and (entropy >= 0).all()
    assert logp.shape == completions.shape


def test_unknown_mode_is_rejected(policy):
    model, prompt, completions, mask = policy
    with pytest.raises(ValueError, match="shared_prompt"):
        group_logprobs(model, prompt, completions, mask, mode="fast")


def _groups_with_a_shared_prefix(tok):
    """Three prompts that share an instruction and differ in their question (lengths differ)."""
    head = "<|user|>Reply with a workflow. Problem: "
    questions = ("Tom has 3 apples.", "What is 12 times 7?", "Sara reads 15 pages a day.")
    prompts = [torch.tensor(tok(f"{head}{q}\n<|assistant|>")["input_ids"]) for q in questions]
    gen = torch.Generator().manual_seed(5)
    completions = [torch.randint(4, 90, (2, 6), generator=gen) for _ in prompts]
    return prompts, completions


def _loss(logp, entropy):
    return (logp * torch.linspace(-1, 1, logp.numel()).view_as(logp)).sum() + 0.1 * entropy.sum()


def test_common_prefix_length_by_hand():
    t = torch.tensor
    assert common_prefix_length([t([1, 2, 3, 4]), t([1, 2, 9, 4, 5])]) == 2
    assert common_prefix_length([t([1, 2, 3]), t([1, 2, 3])]) == 2  # each keeps one own token
    assert common_prefix_length([t([1, 2, 3]), t([1, 2, 3, 4, 5])]) == 2
    assert common_prefix_length([t([7, 2]), t([1, 2])]) == 0
    assert common_prefix_length([]) == 0


def test_a_shared_prefix_gives_each_groups_full_prompt_gradient(policy):
    """Prefix run once, groups against its cache, prefix backward at the end: the log-probs,
    entropies and LoRA gradients of running every group's whole prompt in ``full`` mode."""
    model, *_ = policy
    tok = build_tiny_model(seed=2)[1]
    prompts, completions = _groups_with_a_shared_prefix(tok)
    assert common_prefix_length(prompts) >= 8
    results = []
    for shared in (True, False):
        model.zero_grad(set_to_none=True)
        prefix = prompt_prefix(model, prompts) if shared else None
        out = []
        for prompt, comp in zip(prompts, completions):
            mode = "shared_prompt" if shared else "full"
            logp, ent = group_logprobs(
                model, prompt, comp, torch.ones(2, 6), mode, 0.8, None, prefix
            )
            _loss(logp, ent).backward()
            out.append(logp.detach())
        if shared:
            assert prefix.length == common_prefix_length(prompts)
            prefix.backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad])
        results.append((torch.cat(out), grads))
    (lp_s, g_s), (lp_f, g_f) = results
    assert torch.allclose(lp_s, lp_f, atol=1e-5)
    assert g_f.norm() > 0 and (g_s - g_f).norm() / g_f.norm() < 1e-5


def test_without_the_prefix_backward_the_gradient_is_wrong(policy):
    """The comparison above is sharp: dropping the prefix's share of the gradient is caught."""
    model, *_ = policy
    tok = build_tiny_model(seed=2)[1]
    prompts, completions = _groups_with_a_shared_prefix(tok)
    grads = []
    for shared in (True, False):
        model.zero_grad(set_to_none=True)
        prefix = prompt_prefix(model, prompts) if shared else None
        for prompt, comp in zip(prompts, completions):
            logp, ent = group_logprobs(model, prompt, comp, torch.ones(2, 6), prefix=prefix)
            _loss(logp, ent).backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad]))
    assert (grads[0] - grads[1]).norm() / grads[1].norm() > 1e-2


def test_a_prompt_without_the_prefix_is_refused(policy):
    model, *_ = policy
    tok = build_tiny_model(seed=2)[1]
    prompts, completions = _groups_with_a_shared_prefix(tok)
    with torch.no_grad():
        prefix = prompt_prefix(model, prompts)
        other = torch.tensor(tok("<|user|>Something else entirely.")["input_ids"])
        with pytest.raises(ValueError, match="shared prefix"):
            group_logprobs(model, other, completions[0], torch.ones(2, 6), prefix=prefix)
        with pytest.raises(ValueError, match="shared_prompt"):
            group_logprobs(
                model, prompts[0], completions[0], torch.ones(2, 6), "full", prefix=prefix
            )


def test_one_prompt_or_no_common_token_has_no_prefix(policy):
    model, *_ = policy
    with torch.no_grad():
        assert prompt_prefix(model, [torch.tensor([5, 6, 7])]) is None
        assert prompt_prefix(model, [torch.tensor([5, 6, 7]), torch.tensor([8, 6, 7])]) is None


def test_the_cache_goes_by_the_keyword_the_installed_transformers_takes(policy, monkeypatch):
    """No deprecation warning per call (issue 43): ``cache=`` where forward takes it (5.x),
    ``past_key_values=`` before."""
    import inspect
    import warnings

    from flowgrpo.trainer.algorithms.logprobs import cache_keyword

    model, prompt, completions, mask = policy
    takes = inspect.signature(type(model.get_base_model()).forward).parameters
    assert cache_keyword(model) == ("cache" if "cache" in takes else "past_key_values")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run(model, prompt, completions, mask, "shared_prompt")
    assert not [w for w in caught if "past_key_values" in str(w.message)]
    # transformers' own logger too (reading ``output.past_key_values`` warns there): watched
    # directly, since its warning_once speaks once per process and does not propagate
    generic = pytest.importorskip("transformers.utils.generic")
    said = []
    monkeypatch.setattr(generic, "logger", SimpleNamespace(warning_once=said.append))
    _run(model, prompt, completions, mask, "shared_prompt")
    assert not [m for m in said if "past_key_values" in m]


def _grammar_mask(completions, vocab, per_position=3, seed=0):
    """A mask allowing each position's token and a few others: [K, T, V] bool."""
    draws = torch.Generator().manual_seed(seed)
    allowed = torch.zeros(*completions.shape, vocab, dtype=torch.bool)
    allowed.scatter_(2, completions.unsqueeze(-1), True)
    others = torch.randint(0, vocab // 8, (*completions.shape, per_position), generator=draws)
    allowed.scatter_(2, others, True)
    return allowed


@pytest.mark.parametrize("mode", ["shared_prompt", "full"])
def test_logits_of_the_allowed_columns_only_give_the_full_vocabularys_scores(
    policy, mode, monkeypatch
):
    """Under a grammar mask only the tokens it allows get a logit: the same log-probs, entropies
    and LoRA gradients as the whole vocabulary with the rest at -inf (to float rounding)."""
    model, prompt, completions, mask = policy
    vocab = model.config.vocab_size
    allowed = _grammar_mask(completions, vocab)
    allowed[~mask.bool()] = True  # past a row's end the rollout's mask allows everything
    widths = []
    hook = model.get_output_embeddings().register_forward_hook(
        lambda mod, args, out: widths.append(out.shape[-1])
    )

    def run():
        model.zero_grad()
        logp, entropy = group_logprobs(model, prompt, completions, mask, mode, 0.8, allowed)
        ((logp * mask).sum() + (entropy * mask).sum()).backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad])
        return logp.detach(), entropy.detach(), grads

    monkeypatch.setattr(logprobs, "MAX_COLUMN_SHARE", 1.0)  # the tiny vocabulary is small
    lp_c, ent_c, g_c = run()
    columns = int(allowed[mask.bool()].any(dim=0).sum())
    assert set(widths) == {columns} and columns < vocab, "only the allowed columns ran"
    monkeypatch.setattr(logprobs, "MAX_COLUMN_SHARE", 0.0)  # the whole vocabulary
    widths.clear()
    lp_f, ent_f, g_f = run()
    hook.remove()
    assert set(widths) == {vocab}
    m = mask.bool()
    torch.testing.assert_close(lp_c[m], lp_f[m], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ent_c[m], ent_f[m], rtol=1e-5, atol=1e-6)
    assert (g_c - g_f).norm() / g_f.norm() < 1e-5 and g_f.norm() > 0


def test_the_columns_hold_every_scored_target_and_give_way_to_a_wide_mask():
    completions = torch.tensor([[5, 9, 2]])
    mask = torch.tensor([[1, 1, 0]])
    allowed = torch.zeros(1, 3, 40, dtype=torch.bool)
    allowed[0, 0, [1, 5]] = True  # position 1's target (9) is not in the mask
    assert allowed_columns(allowed, completions, mask).tolist() == [1, 5, 9]
    assert allowed_columns(None, completions, mask) is None
    allowed[0, 2, :] = True  # an unscored position (past the end) allows everything
    assert allowed_columns(allowed, completions, mask).tolist() == [1, 5, 9]
    allowed[0, 1, :20] = True  # half the vocabulary at a scored one: nothing to gain
    assert allowed_columns(allowed, completions, mask) is None


def test_the_head_gets_its_own_forward_back(policy):
    model, prompt, *_ = policy
    head = model.get_output_embeddings()
    with torch.no_grad(), head_columns(model, torch.tensor([3, 7])):
        assert model(input_ids=prompt[None]).logits.shape[-1] == 2
    assert "forward" not in head.__dict__
    with torch.no_grad():
        assert model(input_ids=prompt[None]).logits.shape[-1] == model.config.vocab_size
