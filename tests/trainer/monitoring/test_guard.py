"""In-memory snapshots: a restore after a bad step brings back weights and optimizer state."""

import pytest
import torch

from flowgrpo.trainer.monitoring.guard import restore_snapshot, take_snapshot


def make_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    model[0].weight.requires_grad_(False)  # a frozen base weight, like LoRA's base model
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    return model, optimizer


def train_step(model, optimizer, scale=1.0):
    x = torch.randn(16, 4)
    loss = (model(x) * scale).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def state_tensors(optimizer):
    return {
        (index, key): value.clone()
        for index, state in optimizer.state_dict()["state"].items()
        for key, value in state.items()
    }


def test_restore_after_a_bad_step_gives_back_params_and_optimizer_state_and_scales_lr():
    model, optimizer = make_model()
    train_step(model, optimizer)  # the optimizer has state (exp_avg, exp_avg_sq, step)
    before_params = {n: p.detach().clone() for n, p in model.named_parameters()}
    before_state = state_tensors(optimizer)
    snapshot = take_snapshot(model, optimizer, step=2)
    assert set(snapshot.params) == {"0.bias", "2.weight", "2.bias"}  # only trainable ones
    assert snapshot.nbytes == 4 * (8 + 8 + 1)

    train_step(model, optimizer, scale=100.0)  # the offending update
    assert not torch.equal(model[2].weight, before_params["2.weight"])

    restore_snapshot(model, optimizer, snapshot, lr_factor=0.5)
    for name, param in model.named_parameters():
        assert torch.equal(param, before_params[name]), name
    after_state = state_tensors(optimizer)
    assert after_state.keys() == before_state.keys()
    for key, value in before_state.items():
        assert torch.equal(after_state[key], value), key
    assert optimizer.param_groups[0]["lr"] == pytest.approx(5e-3)
    assert all(p.grad is None for p in model.parameters())


def test_a_snapshot_stays_usable_after_training_on_from_it():
    model, optimizer = make_model()
    train_step(model, optimizer)
    snapshot = take_snapshot(model, optimizer)
    restore_snapshot(model, optimizer, snapshot)
    first = state_tensors(optimizer)
    train_step(model, optimizer)  # must not write into the snapshot's tensors
    restore_snapshot(model, optimizer, snapshot)
    for key, value in first.items():
        assert torch.equal(state_tensors(optimizer)[key], value), key
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-2)  # no factor: unchanged


def test_the_scheduler_base_lr_is_scaled_so_the_next_step_keeps_the_lowering():
    model, optimizer = make_model()
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    train_step(model, optimizer)
    scheduler.step()
    snapshot = take_snapshot(model, optimizer)
    train_step(model, optimizer)
    restore_snapshot(model, optimizer, snapshot, lr_factor=0.5, scheduler=scheduler)
    scheduler.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(5e-3)


def test_bad_inputs_give_clear_errors():
    model, optimizer = make_model()
    train_step(model, optimizer)
    snapshot = take_snapshot(model, optimizer)
    with pytest.raises(ValueError, match="lr_factor"):
        restore_snapshot(model, optimizer, snapshot, lr_factor=0)
    other = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="no trainable parameter"):
        restore_snapshot(other, torch.optim.AdamW(other.parameters()), snapshot)
    frozen = torch.nn.Linear(2, 2).requires_grad_(False)
    with pytest.raises(ValueError, match="requires_grad"):
        take_snapshot(frozen, optimizer)
