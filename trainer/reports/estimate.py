"""Dry-run memory estimate of a run, from the model's config only (no weights are loaded).

Estimates, not measurements: the larger of two phases' peaks, sampling (weights, LoRA + AdamW
states, the KV cache of generation, the stash of merged-weight sampling) and the training forward
of one group (weights, LoRA + AdamW, activations and logits). Within 5-15% of the peaks measured
on an H200 for the shipped 7B config (docs/GPU.md).
"""

from __future__ import annotations

import json
from pathlib import Path

from flowgrpo.operators.random_models import is_random_name, random_shape

# Architectures of models named in configs/, for estimates without a download.
KNOWN = {
    "Qwen/Qwen2.5-7B-Instruct": {
        "hidden_size": 3584,
        "num_hidden_layers": 28,
        "intermediate_size": 18944,
        "vocab_size": 152064,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
    },
    "HuggingFaceTB/SmolLM2-135M-Instruct": {
        "hidden_size": 576,
        "num_hidden_layers": 30,
        "intermediate_size": 1536,
        "vocab_size": 49152,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
    },
}
KNOWN["default"] = KNOWN["HuggingFaceTB/SmolLM2-135M-Instruct"]
_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def model_shape(name_or_path: str) -> dict | None:
    """The config.json fields of a local model, a known hub id, a ``random:<shape>``, or None."""
    if is_random_name(name_or_path):
        return random_shape(name_or_path)
    path = Path(name_or_path) / "config.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    return KNOWN.get(name_or_path)


def estimate(cfg) -> dict:
    """Parameter counts and a memory estimate (GiB) for ``cfg`` (a TrainConfig).

    Two phases do not overlap, so the estimate is the larger of their peaks: sampling (weights,
    LoRA + AdamW, the KV cache of K x problems_per_step rows, and the copy of every adapted base
    weight that merged-weight sampling keeps to restore them bit for bit,
    ``loop.policy.merged_adapter``) and the training forward of one group (weights, LoRA + AdamW,
    activations and logits). Measured on an H200 for configs/qwen2.5-7b.yaml (docs/GPU.md):
    sampling 33.1 GiB allocated against 31.5 estimated, training 23.3 against 20.6.
    """
    shape = model_shape(cfg.model.name_or_path)
    if shape is None:
        return {
            "model": cfg.model.name_or_path,
            "estimate": None,
            "note": "unknown architecture: point model.name_or_path at a local directory "
            "with config.json for an estimate",
        }
    h, layers, vocab = shape["hidden_size"], shape["num_hidden_layers"], shape["vocab_size"]
    dims, kv = _projections(shape)
    params = layers * sum(a * b for a, b in dims.values()) + 2 * vocab * h
    targets = [m for m in cfg.lora.target_modules if m in dims]
    lora = layers * sum(cfg.lora.r * sum(dims[m]) for m in targets)
    adapted = layers * sum(dims[m][0] * dims[m][1] for m in targets)
    wbytes = _BYTES[cfg.model.dtype]
    k, tokens = cfg.rollout.num_generations, 512 + cfg.rollout.max_new_tokens
    act = k * tokens * h * layers * (2 if cfg.model.gradient_checkpointing else 16) * wbytes
    logits = k * cfg.rollout.max_new_tokens * vocab * 4 * 3
    kv_cache = cfg.rollout.problems_per_step * k * tokens * 2 * layers * kv * wbytes
    gib = 1024**3
    parts = {
        "weights": params * wbytes / gib,
        "lora_and_adam": lora * 16 / gib,
        "activations_per_group": (act + logits) / gib,
        "generation_kv_cache": kv_cache / gib,
        "merge_stash": adapted * wbytes / gib,
    }
    fixed = parts["weights"] + parts["lora_and_adam"]
    sampling = fixed + parts["generation_kv_cache"] + parts["merge_stash"]
    training = fixed + parts["activations_per_group"]
    return {
        "model": cfg.model.name_or_path,
        "parameters": params,
        "lora_parameters": lora,
        "gib": {k_: round(v, 2) for k_, v in parts.items()},
        "sampling_gib": round(sampling, 1),
        "training_gib": round(training, 1),
        "total_gib_estimate": round(max(sampling, training), 1),
    }


def _projections(shape: dict) -> tuple[dict[str, tuple[int, int]], int]:
    """(in, out) of every projection of one decoder layer, and the key/value width."""
    h, inter = shape["hidden_size"], shape["intermediate_size"]
    heads = shape["num_attention_heads"]
    kv = h * shape.get("num_key_value_heads", heads) // heads
    dims = {
        "q_proj": (h, h),
        "k_proj": (h, kv),
        "v_proj": (h, kv),
        "o_proj": (h, h),
        "gate_proj": (h, inter),
        "up_proj": (h, inter),
        "down_proj": (inter, h),
    }
    return dims, kv
