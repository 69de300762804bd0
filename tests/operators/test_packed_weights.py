"""Linear weights packed for oneDNN while decoding: the same products up to rounding, and every
module as it was afterwards."""

import pytest
import torch

from flowgrpo.operators import packed_weights
from flowgrpo.operators.models import build_tiny_model
from flowgrpo.operators.packed_weights import packable, packed_linears, packing_available

pytestmark = pytest.mark.skipif(  # the build, not the function under test, decides
    not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN (mkldnn)"
)


def test_packing_is_available_where_torch_has_onednn():
    assert packing_available()


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_packed_logits_match_the_plain_forward_to_rounding():
    model, _ = build_tiny_model(seed=1)
    draws = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (3, 9), generator=draws)
    plain = _logits(model, ids)
    with packed_linears(model, rows=3) as count:
        packed = _logits(model, ids)
    assert count == sum(type(m) is torch.nn.Linear for m in model.modules()) > 0
    torch.testing.assert_close(packed, plain, rtol=1e-4, atol=1e-4)


def test_the_block_really_runs_the_packed_kernel():
    """A weight changed after packing does not reach the output inside the block (the packed
    copy is used), and does afterwards (each module's own forward is back)."""
    model, _ = build_tiny_model(seed=1)
    ids = torch.tensor([[1, 2, 3, 4]])
    layer = model.model.layers[0].mlp.down_proj  # not tied to the embedding, as the head can be
    with packed_linears(model, rows=1):
        before = _logits(model, ids)
        with torch.no_grad():
            layer.weight.mul_(2.0)
        during = _logits(model, ids)
    after = _logits(model, ids)
    assert torch.equal(before, during)
    assert not torch.allclose(after, before)
    assert "forward" not in layer.__dict__


def test_modules_get_their_forward_back_when_the_block_raises():
    model, _ = build_tiny_model(seed=1)
    with pytest.raises(RuntimeError, match="boom"), packed_linears(model, rows=2):
        raise RuntimeError("boom")
    assert not any("forward" in m.__dict__ for m in model.modules())


def test_disabled_packs_nothing():
    model, _ = build_tiny_model(seed=1)
    with packed_linears(model, rows=2, enabled=False) as count:
        assert count == 0
        assert not any("forward" in m.__dict__ for m in model.modules())


def test_a_gradient_through_a_packed_layer_is_refused():
    """The packed kernel has no backward: a training forward inside the block must fail loudly,
    not train on a graph that stops at the layer."""
    layer = torch.nn.Linear(4, 3)
    x = torch.randn(2, 4, requires_grad=True)
    with packed_linears(layer, rows=2), pytest.raises(RuntimeError, match="no-grad inference"):
        layer(x)


def test_only_plain_cpu_linears_in_float32_or_bf16_are_packed():
    class Quantised(torch.nn.Linear):  # a subclass computes its own way (e.g. 4-bit layers)
        pass

    assert packable(torch.nn.Linear(4, 3))
    bf16_units = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert packable(torch.nn.Linear(4, 3).to(torch.bfloat16)) == bf16_units
    assert not packable(torch.nn.Linear(4, 3).to(torch.float16))
    assert not packable(Quantised(4, 3))
    assert not packable(torch.nn.Embedding(4, 3))


def test_leading_dimensions_and_bias_are_kept():
    layer = torch.nn.Linear(5, 7)  # with a bias
    x = torch.randn(2, 3, 5)
    with torch.no_grad():
        plain = layer(x)
        with packed_linears(layer, rows=6):
            packed = layer(x)
    assert packed.shape == (2, 3, 7)
    torch.testing.assert_close(packed, plain, rtol=1e-5, atol=1e-5)


def test_a_kernel_this_cpu_refuses_leaves_every_module_as_it_was(monkeypatch, caplog):
    """Where oneDNN refuses the reorder (another CPU, another build), sampling goes on with the
    default kernel and says so, instead of failing inside ``generate``."""

    def refuse(weight, rows):
        raise RuntimeError("no kernel for this CPU")

    monkeypatch.setattr(packed_weights, "reorder_weight", refuse)
    model, _ = build_tiny_model(seed=1)
    ids = torch.tensor([[1, 2, 3]])
    plain = _logits(model, ids)
    with packed_linears(model, rows=1) as count:
        assert count == 0
        assert torch.equal(_logits(model, ids), plain)
    assert "default kernel is used" in caplog.text


def _frozen(model):
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def test_the_cache_packs_a_frozen_weight_once_and_again_after_it_changed(monkeypatch):
    model, _ = build_tiny_model(seed=1)
    _frozen(model)
    ids = torch.tensor([[1, 2, 3, 4]])
    calls = []
    real = packed_weights.reorder_weight
    monkeypatch.setattr(
        packed_weights, "reorder_weight", lambda w, rows: calls.append(w.shape) or real(w, rows)
    )
    cache = packed_weights.PackCache()
    with packed_linears(model, rows=1, cache=cache) as count:
        first = _logits(model, ids)
    assert len(calls) == count == len(cache) > 0
    with packed_linears(model, rows=1, cache=cache):
        again = _logits(model, ids)
    assert len(calls) == count, "nothing packed the second time"
    assert torch.equal(again, first)
    layer = model.model.layers[0].mlp.down_proj
    with torch.no_grad():
        layer.weight.mul_(2.0)  # an in-place change: the copy is stale
    with packed_linears(model, rows=1, cache=cache):
        changed = _logits(model, ids)
    assert len(calls) == count + 1
    torch.testing.assert_close(changed, _logits(model, ids), rtol=1e-4, atol=1e-4)


def test_the_cache_never_keeps_a_weight_that_trains():
    """A weight that needs a gradient can change under the cache's key (a `.data` write): packed
    fresh every block, never cached."""
    model, _ = build_tiny_model(seed=1)
    cache = packed_weights.PackCache()
    with torch.no_grad(), packed_linears(model, rows=1, cache=cache) as count:
        pass
    assert count > 0 and len(cache) == 0


def test_a_given_weight_replaces_the_module_product():
    """``weights``: the module computes x W'^T + b with the weight given, and a Linear inside it
    is left as it was (the caller's LoRA layer with its merged weight)."""
    outer = torch.nn.Sequential(torch.nn.Linear(6, 4))
    inner = outer[0]
    outer.weight, outer.bias = inner.weight, inner.bias  # acts as a Linear, as a LoRA layer does
    other = torch.randn(4, 6)
    x = torch.randn(3, 6)
    with torch.no_grad(), packed_linears(outer, rows=3, weights={outer: other}) as count:
        got = outer(x)
        assert "forward" not in inner.__dict__
    assert count == 1
    torch.testing.assert_close(got, x @ other.T + inner.bias, rtol=1e-5, atol=1e-5)
    assert "forward" not in outer.__dict__
