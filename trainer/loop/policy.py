"""The policy: a LoRA adapter (peft) on a causal LM, and helpers around it.

The causal LM is loaded by ``flowgrpo.operators.models.load_model`` (``trainer.loop.setup``).

The reference model (for the KL term) and the executor on the CPU default are the same weights
with the adapter disabled (``model.disable_adapter()``), so no second copy is loaded.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import torch
from peft import LoraConfig, get_peft_model
from peft.tuners.lora.layer import Linear as LoraLinear
from peft.tuners.tuners_utils import BaseTunerLayer

from flowgrpo.operators.packed_weights import PackCache, packable, packed_linears, packing_available

logger = logging.getLogger(__name__)


def wrap_lora(model, lora_cfg, gradient_checkpointing: bool = False):
    """Add a fresh LoRA adapter to ``model`` (base weights frozen)."""

    targets = list(lora_cfg.target_modules)
    config = LoraConfig(
        r=lora_cfg.r,
        lora_alpha=lora_cfg.alpha,
        lora_dropout=lora_cfg.dropout,
        target_modules=targets,
        task_type="CAUSAL_LM",
        bias="none",
    )
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    peft_model = get_peft_model(model, config)
    peft_model.train()
    trainable, total = count_parameters(peft_model)
    logger.info(
        "LoRA r=%d on %s: %d trainable of %d parameters (%.2f%%)",
        lora_cfg.r,
        ",".join(targets),
        trainable,
        total,
        100 * trainable / max(total, 1),
    )
    return peft_model


def count_parameters(model) -> tuple[int, int]:
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters())


def adapters_disabled(model) -> bool:
    """Whether peft's ``disable_adapter()`` is on. A disabled layer unmerges itself in its
    own forward, so merging then would be undone mid-call, after :func:`sampling_policy` packed
    the merged weights: the base model would be sampled with the adapter in it."""
    return any(isinstance(m, BaseTunerLayer) and m.disable_adapters for m in model.modules())


@contextlib.contextmanager
def merged_adapter(model, enabled: bool = True) -> Iterator[None]:
    """Generate on merged LoRA weights (faster than the unmerged adapter), unmerge afterwards.

    The merge is undone before anything else uses the model (the executor with the adapter
    disabled, the training forward). ``W + BA - BA`` is not exactly ``W`` in floating point (and
    far from it in bf16), so the base weights of the adapted layers are stashed before the merge
    and copied back afterwards: they are bit-identical after every step.
    """

    can_merge = enabled and hasattr(model, "merge_adapter") and not adapters_disabled(model)
    stash = {}
    if can_merge:
        with torch.no_grad():
            stash = {
                n: p.detach().clone() for n, p in model.named_parameters() if ".base_layer." in n
            }
        model.merge_adapter()
    try:
        yield
    finally:
        if can_merge:
            model.unmerge_adapter()
            params = dict(model.named_parameters())
            with torch.no_grad():
                for name, saved in stash.items():
                    params[name].copy_(saved)


@contextlib.contextmanager
def sampling_policy(
    model,
    merge: bool,
    dtype: torch.dtype | None,
    rows: int,
    packed: bool,
    cache: PackCache | None = None,
) -> Iterator[int]:
    """The policy as a sampling call samples it: in eval mode, without gradients, on its
    weights with the LoRA adapter merged (:func:`merged_adapter`), cast to ``dtype``
    (:func:`parameters_as`), then packed for oneDNN for a batch of ``rows`` on a CPU
    (:func:`flowgrpo.operators.packed_weights.packed_linears`). Each is undone on the way out
    (the base weights bit for bit, the training mode as it was).

    Packed in the model's own dtype, the merge never touches the model: each LoRA layer is
    packed with ``W + BA`` computed beside ``W`` (:func:`merged_lora_weights`, the same sum
    peft's merge writes into ``W``), so nothing is stashed, merged and restored, and ``cache``
    keeps the frozen layers' packed copies from one call to the next. Yields the number of
    packed layers."""
    was_training = model.training
    model.eval()
    own_dtype = dtype in (None, _dtype(model))
    fused = merged_lora_weights(model) if merge and packed and own_dtype else None
    try:
        with (
            torch.no_grad(),
            merged_adapter(model, merge and fused is None),
            parameters_as(model, None if fused is not None else dtype),
            packed_linears(model, rows, packed, fused, cache) as n_packed,
        ):
            yield n_packed
    finally:
        model.train(was_training)


def _dtype(model) -> torch.dtype:
    return next(model.parameters()).dtype


def merged_lora_weights(model) -> dict | None:
    """``{LoRA layer: W + B A * scaling}`` for every LoRA ``Linear`` of ``model``, computed beside
    its base weight ``W`` by peft's own ``get_delta_weight`` and added in peft's order, so each
    is bit for bit what ``merge_adapter`` would write into ``W``. None where packing would not
    use them: no oneDNN, no LoRA layer, or a layer peft merges otherwise (DoRA and other
    variants, a LoRA bias, a merged or disabled adapter, a base layer that is not packable)."""
    if not packing_available():
        return None
    layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    if not layers or not all(_plainly_mergeable(m) for m in layers):
        return None
    with torch.no_grad():
        merged = {}
        for layer in layers:
            weight = layer.get_base_layer().weight
            for name in layer.active_adapters:
                if name in layer.lora_A:
                    weight = weight + layer.get_delta_weight(name)
            merged[layer] = weight
    return merged


def _plainly_mergeable(layer) -> bool:
    """A vanilla LoRA ``Linear`` on a packable base, unmerged and enabled."""
    if type(layer) is not LoraLinear or layer.merged or layer.disable_adapters:
        return False
    active = [a for a in layer.active_adapters if a in layer.lora_A]
    plain = all(a not in layer.lora_variant and not layer.lora_bias[a] for a in active)
    return plain and packable(layer.get_base_layer())


@contextlib.contextmanager
def parameters_as(model, dtype: torch.dtype | None) -> Iterator[None]:
    """Run the block on ``dtype`` copies of every parameter, then give each back its own tensor.

    For sampling in bf16 while the update stays in float32 (``rollout.sample_dtype``): decoding
    one token reads every weight, so on a CPU half the bytes is close to half the time
    (docs/BENCHMARKS.md). Inside :func:`merged_adapter` the copies hold the merged weights. The
    originals are kept by reference, not copied, and restored bit for bit; None or the
    parameters' own dtype changes nothing. The sampling policy then differs from the trained
    one by bf16 rounding (the rollout-training mismatch of Yao et al. 2025, "Your Efficient RL
    Framework Secretly Brings You Off-Policy RL Training"; no importance correction here).
    """

    cast = {} if dtype is None else cast_copies(model, dtype)
    with parameters_from(model, cast):  # the same swap, and the same bit-exact restore
        yield


def cast_copies(model, dtype: torch.dtype, names: set[str] | None = None) -> dict:
    """``dtype`` copies of the named parameters (None: all) not already in ``dtype``, by name."""
    with torch.no_grad():
        return {
            n: p.data.to(dtype)
            for n, p in model.named_parameters()
            if (names is None or n in names) and p.dtype != dtype
        }


def frozen_linear_weights(model, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """``dtype`` copies of the frozen weights and biases of every ``nn.Linear``, by parameter name
    (for :func:`parameters_from`); those already in ``dtype`` are left out.

    For the update under bf16 autocast (``optim.bf16``): autocast casts a weight at every
    forward unless it is a leaf that requires grad, so the frozen base would be cast again at
    every layer of every micro-batch; cast once, the matrix products read half the bytes
    (docs/BENCHMARKS.md). Embeddings and norms are not Linear and stay in their dtype, so the
    residual stream keeps its precision; a head tied to the embedding is not listed (its
    parameter is the embedding's) and stays cast by autocast.
    """
    frozen_linear = {
        f"{name}.{leaf}"
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear)
        for leaf in ("weight", "bias")
        if getattr(module, leaf) is not None and not getattr(module, leaf).requires_grad
    }
    return cast_copies(model, dtype, frozen_linear)


@contextlib.contextmanager
def attention_as(model, implementation: str | None) -> Iterator[None]:
    """Run the block with the model's attention implementation set to ``implementation``
    (transformers' ``set_attn_implementation``: ``eager``, ``sdpa``, ...), then set back; None,
    or a model without the setter, changes nothing."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    before = getattr(getattr(base, "config", None), "_attn_implementation", None)
    setter = getattr(base, "set_attn_implementation", None)
    if implementation is None or setter is None or before in (None, implementation):
        yield
        return
    setter(implementation)
    try:
        yield
    finally:
        setter(before)


def trainable_values(model) -> dict[str, torch.Tensor]:
    """A detached copy of every trainable parameter (the adapter), by name."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


@contextlib.contextmanager
def parameters_from(model, values: dict[str, torch.Tensor]) -> Iterator[None]:
    """Run the block with the named parameters holding ``values`` (the start's adapter, the
    KL reference of ``algorithm.reference: start``); each gets its own tensor back after it."""
    params = dict(model.named_parameters())
    unknown = sorted(set(values) - set(params))
    if unknown:
        raise ValueError(f"parameters_from: the model has no parameter {unknown[0]!r}")
    saved = {name: params[name].data for name in values}
    try:
        for name, value in values.items():
            params[name].data = value
        yield
    finally:
        for name, data in saved.items():
            params[name].data = data


@contextlib.contextmanager
def adapter_disabled(model) -> Iterator[None]:
    """The reference / executor model: the policy's base weights with the adapter off."""
    if hasattr(model, "disable_adapter"):
        with model.disable_adapter():
            yield
    else:
        yield
