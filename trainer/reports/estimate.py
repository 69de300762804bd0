"""Dry-run memory estimate of a run, from the model's config only (no weights are loaded).

Estimates, not measurements: weights + LoRA + AdamW states + an activation term for the training
forward of one group, plus the KV cache of generation. Good to a factor of ~1.5.
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
    """Parameter counts and a memory estimate (GiB) for ``cfg`` (a TrainConfig)."""
    shape = model_shape(cfg.model.name_or_path)
    if shape is None:
        return {
            "model": cfg.model.name_or_path,
            "estimate": None,
            "note": "unknown architecture: point model.name_or_path at a local directory "
            "with config.json for an estimate",
        }
    h, layers = shape["hidden_size"], shape["num_hidden_layers"]
    inter, vocab = shape["intermediate_size"], shape["vocab_size"]
    kv = (
        h
        * shape.get("num_key_value_heads", shape["num_attention_heads"])
        // shape["num_attention_heads"]
    )
    params = layers * (2 * h * h + 2 * h * kv + 3 * h * inter) + 2 * vocab * h
    dims = {
        "q_proj": (h, h),
        "k_proj": (h, kv),
        "v_proj": (h, kv),
        "o_proj": (h, h),
        "gate_proj": (h, inter),
        "up_proj": (h, inter),
        "down_proj": (inter, h),
    }
    r = cfg.lora.r
    lora = layers * sum(r * sum(dims[m]) for m in cfg.lora.target_modules if m in dims)
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
    }
    return {
        "model": cfg.model.name_or_path,
        "parameters": params,
        "lora_parameters": lora,
        "gib": {k_: round(v, 2) for k_, v in parts.items()},
        "total_gib_estimate": round(sum(parts.values()), 1),
    }
