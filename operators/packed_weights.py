"""Decoding on a CPU with every ``nn.Linear`` weight pre-packed for oneDNN.

Why: a decoding step multiplies a few rows (the batch) by every weight of the model. For so few
rows torch's default CPU kernel streamed a float32 weight at about 6 GB/s on a Zen 4 CPU, a
third of what its memory delivered; oneDNN's kernel on the same weight reordered once into its
blocked layout runs 2-4x faster on SmolLM2-135M's output layer, and a whole decoding step of
8-16 rows takes 0.5-0.7x the time (docs/BENCHMARKS.md, "Packed weights"). PyTorch's own
compiler does the same when it freezes a model for CPU inference (inductor's weight
prepacking, ``torch.ops.mkldnn._reorder_linear_weight`` / ``_linear_pointwise``).

The product is the same matrix product summed in another order: outputs differ from
``F.linear``'s by float rounding (SmolLM2-135M's logits by at most 2e-4 in the timings of
docs/BENCHMARKS.md; the tests hold the tiny model's to 1e-4), so a sampled token can differ only
where a draw falls within rounding of a boundary.

Packing is for the duration of a block (:func:`packed_linears`): weights merged or cast inside
it (``merged_adapter``, ``parameters_as``) are packed as they are then, and every module gets its
own ``forward`` back afterwards. A :class:`PackCache` keeps the packed copies of weights that
do not change (a LoRA run's frozen layers) from one block to the next, so only the weights that
moved are packed again. Outside a CPU with oneDNN, or for another dtype or a subclass of
``nn.Linear`` (quantised layers), it changes nothing.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator

import torch

logger = logging.getLogger(__name__)

#: The weight dtypes oneDNN's packed kernel is used for.
PACKED_DTYPES = (torch.float32, torch.bfloat16)


def packing_available() -> bool:
    """Whether this torch has the oneDNN CPU kernels :func:`packed_linears` calls."""
    ops = getattr(torch.ops, "mkldnn", None)
    return (
        torch.backends.mkldnn.is_available()
        and hasattr(ops, "_reorder_linear_weight")
        and hasattr(ops, "_linear_pointwise")
    )


def packable(module: torch.nn.Module) -> bool:
    """A plain ``nn.Linear`` on the CPU whose weight oneDNN packs: float32, or bf16 where the
    CPU multiplies bf16 itself (elsewhere oneDNN has no bf16 kernel to pack for)."""
    if type(module) is not torch.nn.Linear:  # subclasses (quantised layers) compute otherwise
        return False
    weight = module.weight
    if weight.device.type != "cpu" or weight.dim() != 2 or weight.dtype not in PACKED_DTYPES:
        return False
    return weight.dtype != torch.bfloat16 or torch.ops.mkldnn._is_mkldnn_bf16_supported()


def reorder_weight(weight: torch.Tensor, rows: int) -> torch.Tensor:
    """``weight`` in oneDNN's blocked layout for products with ``rows`` rows (a copy)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight, max(rows, 1))


def _packed_forward(packed_w: torch.Tensor, bias: torch.Tensor | None, x: torch.Tensor):
    """``F.linear(x, W, b)`` with ``W`` packed; any number of leading dimensions."""
    if x.dtype != packed_w.dtype or x.requires_grad:  # autocast or autograd: not this kernel
        raise RuntimeError("packed Linear weights are for no-grad inference in their own dtype")
    rows = x.reshape(-1, x.shape[-1])
    out = torch.ops.mkldnn._linear_pointwise(rows, packed_w, bias, "none", [], "")
    return out.reshape(*x.shape[:-1], out.shape[-1])


class PackCache:
    """Packed copies of weights that stay the same between :func:`packed_linears` blocks.

    A weight that needs no gradient (a LoRA run's frozen base: the MLP and output layers of
    SmolLM2 are 80% of its Linear weights) is packed once and reused while the same tensor holds
    the same values (its storage and its in-place version counter unchanged); a weight that
    changed is packed again. The copies stay resident between blocks (SmolLM2-135M's frozen
    layers: ~430 MB in float32), which is the price of not reordering them at every
    ``generate`` call. The kernel's ``rows`` hint is that of the block that packed the weight.
    Owned by whoever samples repeatedly (a run's trainer, an evaluation), never global.
    """

    def __init__(self) -> None:
        # id -> (the weight itself, held so that its id is not reused; its key; the copy)
        self._packed: dict[int, tuple[torch.Tensor, tuple, torch.Tensor]] = {}

    @staticmethod
    def _key(weight: torch.Tensor) -> tuple:
        return (weight.data_ptr(), weight._version, weight.dtype, tuple(weight.shape))

    def packed(self, weight: torch.Tensor, rows: int) -> torch.Tensor:
        """``weight`` reordered for oneDNN, from the cache while it is unchanged."""
        key = self._key(weight)
        held = self._packed.get(id(weight))
        if held is None or held[0] is not weight or held[1] != key:
            held = (weight, key, reorder_weight(weight.detach(), rows))
            self._packed[id(weight)] = held
        return held[2]

    def __len__(self) -> int:
        return len(self._packed)


def _packed_forward_of(
    module: torch.nn.Linear, rows: int, weight: torch.Tensor | None, cache: PackCache | None
):
    """``module``'s forward on a packed copy of ``weight`` (None: its own), from ``cache``
    when it is the module's own frozen weight."""
    bias = None if module.bias is None else module.bias.detach()
    if weight is None and cache is not None and not module.weight.requires_grad:
        packed = cache.packed(module.weight, rows)
    else:
        packed = reorder_weight((module.weight if weight is None else weight).detach(), rows)
    return functools.partial(_packed_forward, packed, bias)


def _packed_forwards(modules: list, rows: int, weights: dict, cache: PackCache | None) -> list:
    """Each module's packed forward, the kernel tried once on a zero row; [] (with a warning)
    where this build or CPU refuses it, so that sampling goes on with the default kernel."""
    try:
        forwards = [_packed_forward_of(m, rows, weights.get(m), cache) for m in modules]
        if forwards:
            weight = modules[0].weight
            with torch.no_grad():
                forwards[0](torch.zeros(1, weight.shape[1], dtype=weight.dtype))
        return forwards
    except RuntimeError as exc:
        logger.warning("packed Linear weights unavailable (%s); the default kernel is used", exc)
        return []


def _targets(model: torch.nn.Module, weights: dict) -> list:
    """The modules to pack: every packable ``nn.Linear`` and every module of ``weights``, but
    not a Linear inside one of those (its forward is no longer called)."""
    inner = {id(m) for owner in weights for m in owner.modules() if m is not owner}
    return [m for m in model.modules() if (m in weights or packable(m)) and id(m) not in inner]


@contextlib.contextmanager
def packed_linears(
    model: torch.nn.Module,
    rows: int,
    enabled: bool = True,
    weights: dict | None = None,
    cache: PackCache | None = None,
) -> Iterator[int]:
    """Run the block with every packable ``nn.Linear`` of ``model`` on a oneDNN-packed copy of
    its weight (``rows``: the batch the kernel is tuned for, the decoding batch). Yields how many
    modules were packed (0: nothing changed: disabled, no oneDNN, no packable layer, or the
    kernel refused here).

    ``weights``: modules whose forward becomes a product with the given weight instead (the
    Linear layers inside them are then left alone): a LoRA layer with its merged weight
    ``W + BA``, computed by the caller without touching ``W``; each must act as a Linear with
    that weight and its ``bias``. ``cache``: reuse the packed copies of unchanged frozen weights
    (:class:`PackCache`).

    For inference only (``torch.no_grad``): a packed layer raises on an input that needs a
    gradient. The copies live for the block (one more copy of the packed weights' bytes), those
    in ``cache`` as long as it does.
    """
    weights = weights or {}
    on = enabled and packing_available()
    modules = _targets(model, weights) if on else []
    forwards = _packed_forwards(modules, rows, weights, cache)
    modules = modules if forwards else []
    try:
        for module, forward in zip(modules, forwards, strict=True):
            module.forward = forward
        yield len(modules)
    finally:
        for module in modules:
            module.__dict__.pop("forward", None)  # the class's own forward again
