"""Format SFT's loss with a shared prompt prefix and completion-only logits equals HF's own
``labels=`` loss of the padded full sequences: value and LoRA gradients."""

from types import SimpleNamespace

import pytest
import torch

from flowgrpo.operators.models import build_tiny_model
from flowgrpo.trainer.algorithms.completion_loss import (
    completion_backward,
    completion_loss,
    micro_batches,
)
from flowgrpo.trainer.loop.policy import wrap_lora

SHARED = [5, 6, 7, 8, 9, 10]  # a common instruction every prompt starts with


def _policy(gradient_checkpointing=False):
    model, _ = build_tiny_model(seed=3)
    lora = SimpleNamespace(
        r=4, alpha=8, dropout=0.0, target_modules=("q_proj", "k_proj", "v_proj", "o_proj")
    )
    peft = wrap_lora(model, lora, gradient_checkpointing)  # as setup.policy builds it
    torch.manual_seed(0)
    for name, p in peft.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.2)
    return peft


@pytest.fixture
def policy():
    return _policy()


def _reference(model, batch, pad_id=0):
    """HF's loss: right-padded prompt + completion rows, prompt and padding labelled -100."""
    width = max(len(p) + len(c) for p, c in batch)
    ids = torch.full((len(batch), width), pad_id)
    labels = torch.full((len(batch), width), -100)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, (p, c) in enumerate(batch):
        ids[i, : len(p) + len(c)] = torch.tensor(p + c)
        labels[i, len(p) : len(p) + len(c)] = torch.tensor(c)
        mask[i, : len(p) + len(c)] = 1
    return model(input_ids=ids, attention_mask=mask, labels=labels).loss


def _value_and_grad(model, loss_fn, batch):
    model.zero_grad()
    loss = loss_fn(model, batch)
    loss.backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad])
    return float(loss), grads


def _check(model, batch, share_prefix=True):
    ours, g_ours = _value_and_grad(
        model, lambda m, b: completion_loss(m, b, pad_id=0, share_prefix=share_prefix), batch
    )
    ref, g_ref = _value_and_grad(model, _reference, batch)
    assert ours == pytest.approx(ref, rel=1e-5)
    assert g_ref.norm() > 0 and torch.isfinite(g_ours).all()
    assert (g_ours - g_ref).norm() / g_ref.norm() < 1e-4


def test_a_shared_prefix_and_rows_of_different_lengths_give_the_full_loss(policy):
    batch = [
        ([*SHARED, 20, 21, 22], [30, 31, 32, 2]),
        ([*SHARED, 23], [33, 2]),  # a shorter own prompt and completion
        ([*SHARED, 24, 25, 26, 27, 28], [34, 35, 36, 37, 38, 2]),
    ]
    _check(policy, batch)


def test_prompts_that_share_nothing_give_the_full_loss(policy):
    _check(policy, [([40, 41, 42], [30, 2]), ([43, 44], [31, 32, 2])])


def test_a_batch_of_one_pair_gives_the_full_loss(policy):
    _check(policy, [([*SHARED, 20], [30, 31, 2])])


def test_identical_prompts_keep_one_token_of_their_own(policy):
    _check(policy, [(SHARED, [30, 2]), (SHARED, [31, 32, 2])])


def test_gradient_checkpointing_runs_whole_prompts_with_the_same_loss():
    policy = _policy(gradient_checkpointing=True)
    policy.train()
    _check(policy, [([*SHARED, 20, 21], [30, 2]), ([*SHARED, 22], [31, 32, 2])], False)


def test_only_the_completion_positions_reach_the_vocabulary(policy):
    """The projection runs on B x (longest completion + 1) rows, not on every position."""
    seen = []
    head = policy.get_base_model().get_output_embeddings()
    hook = head.register_forward_hook(lambda m, i, o: seen.append(o.shape[:2]))
    try:
        batch = [([*SHARED, 20, 21, 22, 23], [30, 2]), ([*SHARED, 24], [31, 32, 33, 2])]
        completion_loss(policy, batch, pad_id=0)
    finally:
        hook.remove()
    assert seen[-1] == (2, 5), seen  # 2 rows x (4 completion tokens + 1)


@pytest.mark.parametrize("share_prefix", [True, False])
@pytest.mark.parametrize("micro_batch", [1, 2, 3, None])
def test_micro_batches_give_the_whole_batchs_loss_and_gradient(policy, micro_batch, share_prefix):
    batch = [
        ([*SHARED, 20, 21, 22], [30, 31, 32, 2]),
        ([*SHARED, 23], [33, 2]),
        ([*SHARED, 24, 25, 26, 27, 28], [34, 35, 36, 37, 38, 2]),
    ]
    policy.zero_grad()
    value = completion_backward(policy, batch, 0, micro_batch, share_prefix)
    ours = torch.cat([p.grad.flatten() for p in policy.parameters() if p.requires_grad])
    ref, g_ref = _value_and_grad(policy, _reference, batch)
    assert value == pytest.approx(ref, rel=1e-5)
    assert (ours - g_ref).norm() / g_ref.norm() < 1e-4


@pytest.mark.parametrize("micro_batch", [1, None])
def test_bf16_autocast_runs_the_forward_in_bf16_and_keeps_the_fp32_loss_and_gradient(
    policy, micro_batch
):
    """sft.bf16: the projections run in bfloat16 (a hook sees their outputs), the LoRA
    parameters and their gradients stay float32, and the loss and gradient stay within bf16's
    rounding of HF's float32 loss of the full sequences (an independent computation)."""
    batch = [
        ([*SHARED, 20, 21, 22], [30, 31, 32, 2]),
        ([*SHARED, 23], [33, 2]),
        ([*SHARED, 24, 25, 26, 27, 28], [34, 35, 36, 37, 38, 2]),
    ]
    dtypes = []
    q_proj = next(m for n, m in policy.named_modules() if n.endswith("q_proj.base_layer"))
    hook = q_proj.register_forward_hook(lambda m, i, o: dtypes.append(o.dtype))
    policy.zero_grad()
    try:
        value = completion_backward(policy, batch, 0, micro_batch, bf16=True)
    finally:
        hook.remove()
    trained = [p for p in policy.parameters() if p.requires_grad]
    ours = torch.cat([p.grad.flatten() for p in trained])
    ref, g_ref = _value_and_grad(policy, _reference, batch)
    assert dtypes and set(dtypes) == {torch.bfloat16}
    assert {p.dtype for p in trained} == {torch.float32} and ours.dtype == torch.float32
    assert value == pytest.approx(ref, rel=2e-2) and value != pytest.approx(ref, rel=1e-6)
    assert torch.nn.functional.cosine_similarity(ours, g_ref, dim=0) > 0.99
    policy.zero_grad()
    completion_backward(policy, batch, 0, micro_batch)  # off: float32 throughout
    fp32 = torch.cat([p.grad.flatten() for p in trained])
    assert (fp32 - g_ref).norm() / g_ref.norm() < 1e-4


def _padded(groups, start):
    """Positions a micro-batch runs: rows x (longest own prompt part + longest completion)."""
    return sum(
        len(g) * (max(len(p) - start for p, _ in g) + max(len(c) for _, c in g)) for g in groups
    )


def test_micro_batches_group_rows_of_like_length():
    batch = [([1] * 7, [2]), ([1] * 3, [2] * 5), ([1] * 4, [2]), ([1] * 8, [2] * 2)]
    groups = micro_batches(batch, 2, start=2)  # own prompt parts 5, 1, 2, 6 tokens
    assert groups == [[batch[1], batch[2]], [batch[0], batch[3]]]
    in_order = [batch[:2], batch[2:]]
    assert _padded(groups, 2) == 2 * (2 + 5) + 2 * (6 + 2) == 30
    assert _padded(in_order, 2) == 2 * (5 + 5) + 2 * (6 + 2) == 36
    assert micro_batches(batch, 4) == [sorted(batch, key=lambda pc: (len(pc[0]), len(pc[1])))]
    assert micro_batches(batch[:1], 3) == [batch[:1]], "a batch of one pair"
