"""The update optimises what it says, on the distribution that was sampled.

* log-probs at temperature T equal log_softmax(scores) of the tokens ``generate`` sampled at T
  (its own processed scores), for T in {0.7, 1.0, 1.3};
* for every policy loss x aggregation (and beta > 0, entropy bonus, top-entropy mask, truncation
  mask, old != new log-probs as in the second of mu = 2 steps): the gradient accumulated group by
  group equals the gradient of the same loss computed on the whole batch at once;
* gradient checkpointing gives the same gradients as without.
"""

import itertools
from types import SimpleNamespace

import pytest
import torch

from flowgrpo.operators.models import build_tiny_model
from flowgrpo.operators.tasks.base import Problem
from flowgrpo.trainer.algorithms.logprobs import group_logprobs
from flowgrpo.trainer.algorithms.losses import available_aggregations
from flowgrpo.trainer.algorithms.objective import policy_objective
from flowgrpo.trainer.config import LossConfig
from flowgrpo.trainer.loop.policy import adapter_disabled, wrap_lora
from flowgrpo.trainer.loop.rollout import Rollout, completion_mask
from flowgrpo.trainer.loop.update import UpdateBatch, UpdateSettings, accumulate_gradients

LORA = SimpleNamespace(r=4, alpha=8, dropout=0.0, target_modules=("q_proj", "v_proj"))
GRAD_RTOL = 1e-5  # float32 on CPU: summing per-group gradients reorders additions only


def _policy(gradient_checkpointing=False, seed=3):
    model, tok = build_tiny_model(seed=seed)
    peft = wrap_lora(model, LORA, gradient_checkpointing)
    torch.manual_seed(seed)
    for name, p in peft.named_parameters():
        if "lora_B" in name:  # a non-zero adapter, so policy != reference
            torch.nn.init.normal_(p, std=0.3)
    peft.train()
    return peft, tok


@pytest.mark.parametrize("temperature", [0.7, 1.0, 1.3])
@pytest.mark.parametrize("mode", ["shared_prompt", "full"])
def test_logprobs_equal_generates_own_scores_at_the_sampling_temperature(temperature, mode):
    model, tok = _policy()
    prompt = torch.tensor(tok("<|user|>Tom has 3 apples.\n<|assistant|>")["input_ids"])
    torch.manual_seed(0)
    model.eval()
    with torch.no_grad():
        out = model.generate(
            input_ids=prompt[None].repeat(4, 1),
            attention_mask=torch.ones(4, len(prompt), dtype=torch.long),
            do_sample=True, temperature=temperature, top_p=1.0, top_k=0, max_new_tokens=8,
            output_scores=True, return_dict_in_generate=True, pad_token_id=tok.eos_token_id,
        )  # fmt: skip
    completion = out.sequences[:, len(prompt) :]
    scores_KTV = torch.stack(out.scores, dim=1)  # processed: logits / T, what was sampled from
    expected = torch.log_softmax(scores_KTV.float(), -1).gather(-1, completion[..., None])[..., 0]
    mask, _ = completion_mask(completion, [tok.eos_token_id])
    with torch.no_grad():
        logp, _ = group_logprobs(model, prompt, completion, mask, mode, temperature)
    m = mask.bool()
    assert torch.allclose(logp[m], expected[m], atol=1e-4), (logp[m] - expected[m]).abs().max()
    if temperature != 1.0:  # the untempered log-probs are a different distribution
        with torch.no_grad():
            raw, _ = group_logprobs(model, prompt, completion, mask, mode, 1.0)
        assert (raw[m] - expected[m]).abs().max() > 1e-2


def _rollout(tok, k=3, t=7, seed=0):
    """Two groups with different prompts; ragged completion lengths; one truncated row."""
    gen = torch.Generator().manual_seed(seed)
    prompts = [
        torch.tensor(tok(f"<|user|>{q}\n<|assistant|>")["input_ids"])
        for q in ("Tom has 3 apples.", "What is 12 times 7 minus 5?")
    ]
    ids = torch.randint(4, 90, (2 * k, t), generator=gen)
    eos = tok.eos_token_id
    for row, length in enumerate((2, 7, 4, 1, 6, 3)[: 2 * k]):
        if length < t:
            ids[row, length] = eos
            ids[row, length + 1 :] = tok.pad_token_id or 0
    mask, truncated = completion_mask(ids, [eos])
    problems = [Problem(id=f"p{i}", question="q", answer="1", domain="math") for i in range(2)]
    return Rollout(problems, k, prompts, ids, mask, truncated, [""] * (2 * k), 0.0)


def _whole_batch_grads(model, rollout, adv, cfg, temperature, old, ref, seed):
    """The same loss computed on the whole batch at once (one policy_objective call)."""
    model.zero_grad(set_to_none=True)
    k = rollout.group_size
    parts = [
        group_logprobs(
            model, prompt, rollout.completion_ids_NT[g * k : (g + 1) * k],
            rollout.mask_NT[g * k : (g + 1) * k], "shared_prompt", temperature,
        )
        for g, prompt in enumerate(rollout.prompt_ids)
    ]  # fmt: skip
    logp = torch.cat([p[0] for p in parts])
    entropy = torch.cat([p[1] for p in parts])
    torch.manual_seed(seed)
    total, _ = policy_objective(
        logp, old if old is not None else logp.detach(), adv, rollout.mask_NT, cfg,
        ref_logp_NT=ref, entropy_NT=entropy, truncated_N=rollout.truncated_N,
    )  # fmt: skip
    total.backward()
    return _grads(model), float(total.detach())


def _grads(model):
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad])


def _fixed(model, rollout, temperature, reference=False):
    k, out = rollout.group_size, []
    with torch.no_grad(), adapter_disabled(model) if reference else torch.no_grad():
        for g, prompt in enumerate(rollout.prompt_ids):
            rows = slice(g * k, (g + 1) * k)
            out.append(
                group_logprobs(model, prompt, rollout.completion_ids_NT[rows],
                               rollout.mask_NT[rows], "shared_prompt", temperature)[0]
            )  # fmt: skip
    return torch.cat(out)


EXTRAS = {
    "plain": {},
    "beta_entropy": {"beta": 0.1, "entropy_coef": 0.01},
    "top_entropy_truncated": {"top_entropy_frac": 0.5, "mask_truncated": True},
}


@pytest.mark.parametrize(
    ("loss", "agg", "extra"),
    list(itertools.product(("clip", "gspo", "clip_cov", "kl_cov"), available_aggregations(),
                           EXTRAS)),
)  # fmt: skip
def test_group_by_group_gradient_equals_the_whole_batch_gradient(loss, agg, extra):
    model, tok = _policy()
    rollout = _rollout(tok)
    temperature = 0.8
    kwargs = {"policy_loss": loss, "loss_agg": agg, "max_new_tokens": 7, **EXTRAS[extra]}
    # Selection ratios large enough that Clip-Cov / KL-Cov select several tokens of 27.
    cfg = LossConfig(clip_cov_ratio=0.2, clip_cov_lb=-5.0, kl_cov_ratio=0.2, **kwargs)
    adv = torch.tensor([1.0, -0.5, 0.2, -1.2, 0.7, 0.3])
    # old != current log-probs: the second optimizer step of mu = 2 (ratios away from 1).
    old = _fixed(model, rollout, temperature) + 0.3 * torch.randn(6, 7).clamp(-1, 1)
    ref = _fixed(model, rollout, temperature, reference=True) if cfg.beta > 0 else None
    settings = UpdateSettings(loss=cfg, logprob_mode="shared_prompt", temperature=temperature)
    torch.manual_seed(7)
    metrics = accumulate_gradients(model, UpdateBatch(rollout, adv), settings, old, ref)
    micro = _grads(model)
    whole, whole_loss = _whole_batch_grads(model, rollout, adv, cfg, temperature, old, ref, 7)
    assert whole.norm() > 0
    assert (micro - whole).norm() / whole.norm() < GRAD_RTOL
    assert metrics["loss"] == pytest.approx(whole_loss, rel=1e-5, abs=1e-7)


def test_a_wrong_per_group_normaliser_would_be_caught():
    """The comparison above is sharp: normalising each group by its own count (the old bug for
    token_mean) changes the gradient by far more than the tolerance."""
    model, tok = _policy()
    rollout = _rollout(tok)
    cfg = LossConfig(loss_agg="token_mean", max_new_tokens=7)
    adv = torch.tensor([1.0, -0.5, 0.2, -1.2, 0.7, 0.3])
    whole, _ = _whole_batch_grads(model, rollout, adv, cfg, 1.0, None, None, 0)
    model.zero_grad(set_to_none=True)
    for g, prompt in enumerate(rollout.prompt_ids):
        rows = slice(3 * g, 3 * g + 3)
        logp, _ = group_logprobs(
            model, prompt, rollout.completion_ids_NT[rows], rollout.mask_NT[rows]
        )
        total, _ = policy_objective(logp, logp.detach(), adv[rows], rollout.mask_NT[rows], cfg)
        (total / 2).backward()  # each group's own token mean, averaged over groups
    assert (_grads(model) - whole).norm() / whole.norm() > 100 * GRAD_RTOL


def test_gradient_checkpointing_gives_the_same_gradients():
    grads, weights = [], None
    for checkpointing in (False, True):
        model, tok = _policy(gradient_checkpointing=checkpointing)
        if weights is None:
            weights = {n: p.detach().clone() for n, p in model.named_parameters()}
        else:  # the same weights in both (LoRA init draws differ with checkpointing on)
            with torch.no_grad():
                for n, p in model.named_parameters():
                    p.copy_(weights[n])
        assert model.base_model.model.is_gradient_checkpointing == checkpointing
        rollout = _rollout(tok)
        cfg = LossConfig(max_new_tokens=7)
        settings = UpdateSettings(loss=cfg, logprob_mode="full", temperature=0.8)
        adv = torch.tensor([1.0, -0.5, 0.2, -1.2, 0.7, 0.3])
        accumulate_gradients(model, UpdateBatch(rollout, adv), settings)
        grads.append(_grads(model))
    assert grads[0].norm() > 0
    assert (grads[0] - grads[1]).norm() / grads[0].norm() < 1e-5


def _random_grammar_bits(rollout, vocab: int, seed: int = 0) -> torch.Tensor:
    """Packed masks [N, T, W] allowing a random third of the vocabulary plus the sampled token
    (a stand-in for the grammar: what matters is that the update uses the stored mask)."""
    gen = torch.Generator().manual_seed(seed)
    n, t = rollout.completion_ids_NT.shape
    allowed_NTV = torch.rand(n, t, vocab, generator=gen) < 1 / 3
    allowed_NTV.scatter_(-1, rollout.completion_ids_NT[..., None], True)
    words = (vocab + 31) // 32
    padded = torch.zeros(n, t, words * 32, dtype=torch.int64)
    padded[..., :vocab] = allowed_NTV.long()
    shifts = torch.arange(32, dtype=torch.int64)
    packed = (padded.view(n, t, words, 32) << shifts).sum(-1)
    return packed.to(torch.int64).where(packed < 2**31, packed - 2**32).to(torch.int32), allowed_NTV


def test_the_constrained_gradient_equals_a_hand_written_masked_log_softmax():
    """rollout.constrained=grammar: the update's gradient (group by group, shared-prompt
    forward, stored packed masks) equals the gradient of -sum(A * log p) / (N * T_max) where
    log p is computed here independently: a full forward of prompt + completion, logits / T,
    disallowed tokens set to -inf, log_softmax (ratio 1: the first mu-step of clip)."""
    model, tok = _policy()
    rollout = _rollout(tok)
    vocab, temperature = model.config.vocab_size, 0.8
    rollout.allowed_bits_NTW, allowed_NTV = _random_grammar_bits(rollout, vocab)
    adv = torch.tensor([1.0, -0.5, 0.2, -1.2, 0.7, 0.3])
    cfg = LossConfig(max_new_tokens=7)
    settings = UpdateSettings(loss=cfg, logprob_mode="shared_prompt", temperature=temperature)
    accumulate_gradients(model, UpdateBatch(rollout, adv), settings)
    update_grads = _grads(model)

    model.zero_grad(set_to_none=True)
    k, total = rollout.group_size, 0.0
    for row in range(len(adv)):
        prompt = rollout.prompt_ids[row // k]
        ids = torch.cat([prompt, rollout.completion_ids_NT[row]])
        logits = model(input_ids=ids[None]).logits[0, len(prompt) - 1 : -1] / temperature
        logits = logits.masked_fill(~allowed_NTV[row], float("-inf"))
        logp = torch.log_softmax(logits, -1).gather(-1, rollout.completion_ids_NT[row, :, None])
        total = total - adv[row] * (logp[:, 0] * rollout.mask_NT[row]).sum()
    (total / (len(adv) * 7)).backward()
    hand = _grads(model)
    assert hand.norm() > 0
    assert (update_grads - hand).norm() / hand.norm() < 1e-4
    # and the mask matters: without it the gradient is another one
    rollout.allowed_bits_NTW = None
    accumulate_gradients(model, UpdateBatch(rollout, adv), settings)
    assert (_grads(model) - hand).norm() / hand.norm() > 1e-2
