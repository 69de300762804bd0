"""Starting the policy from a saved LoRA adapter (``model.init_adapter``) instead of a fresh one.

A fresh adapter (B = 0) starts exactly at the base model; a saved one (e.g. the format-trained
start written by ``flowgrpo sft``) starts wherever its training left it. Its shape must
be the one the config asks for (``lora.r``, ``lora.alpha``, ``lora.target_modules``): otherwise
the run would silently train another adapter than the config says, so it is an error naming
both. ``lora.dropout`` is the config's (it only matters while training).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from peft import LoraConfig, PeftModel
from safetensors import safe_open

from flowgrpo.trainer.loop.policy import count_parameters
from flowgrpo.trainer.loop.rundir import adapter_folder

logger = logging.getLogger(__name__)

HOW_TO_MAKE = "produce one with: flowgrpo sft --config CONFIG --out {path}"


def adapter_dir(path: str | Path) -> Path:
    """The directory holding adapter_config.json (``path`` or ``path/adapter``), or
    ``FileNotFoundError`` naming ``model.init_adapter`` and how to make one."""
    found = adapter_folder(path)
    if found is not None:
        return check_adapter_files(found)
    raise FileNotFoundError(
        f"model.init_adapter: {path} holds no LoRA adapter (no adapter_config.json); "
        f"{HOW_TO_MAKE.format(path=path)}, or set model.init_adapter: null for a fresh adapter"
    )


def check_adapter_files(directory: Path) -> Path:
    """``directory`` when its adapter_config.json parses and its weights file is there and opens
    (the header only: cheap), else a ``ValueError`` naming the damaged or missing file, before
    any model is loaded."""
    config = directory / "adapter_config.json"
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{config} does not load ({exc}): the adapter is damaged") from None
    if not isinstance(data, dict) or not data.get("peft_type"):
        raise ValueError(
            f"{config} is no PEFT adapter config (no peft_type): the adapter is damaged, or the "
            "folder holds another model's files"
        )
    weights = directory / "adapter_model.safetensors"
    if not weights.is_file() and not (directory / "adapter_model.bin").is_file():
        raise ValueError(
            f"{directory} has no adapter weights ({weights.name}): the adapter is incomplete "
            "(a copy that left the weights behind?)"
        )
    if weights.is_file():
        try:
            with safe_open(str(weights), framework="pt"):
                pass
        except Exception as exc:  # safetensors raises its own error types
            raise ValueError(
                f"{weights} does not load ({type(exc).__name__}: {str(exc)[:200]}): the adapter "
                "is damaged"
            ) from None
    return directory


def check_adapter_shape(path: str | Path, lora_cfg) -> dict:
    """The saved adapter's config; ``ValueError`` when r, alpha or target modules differ from
    the ``lora`` section (the message lists both and the two ways out)."""
    saved = json.loads((adapter_dir(path) / "adapter_config.json").read_text(encoding="utf-8"))
    have = {
        "r": saved.get("r"),
        "alpha": saved.get("lora_alpha"),
        "target_modules": sorted(saved.get("target_modules") or ()),
    }
    want = {
        "r": lora_cfg.r,
        "alpha": lora_cfg.alpha,
        "target_modules": sorted(lora_cfg.target_modules),
    }
    wrong = [key for key in want if have[key] != want[key]]
    if wrong:
        diff = ", ".join(f"lora.{k}: adapter {have[k]} vs config {want[k]}" for k in wrong)
        raise ValueError(
            f"model.init_adapter: {path} does not have the shape of the lora section ({diff}); "
            "set the lora section to the adapter's values, or retrain the adapter with them"
        )
    return saved


def load_init_adapter(model, path: str | Path, lora_cfg, gradient_checkpointing: bool = False):
    """``model`` (base weights) wrapped with the trainable adapter saved at ``path``."""
    check_adapter_shape(path, lora_cfg)
    directory = adapter_dir(path)
    config = LoraConfig.from_pretrained(str(directory))
    config.lora_dropout = lora_cfg.dropout
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    try:
        peft_model = PeftModel.from_pretrained(
            model, str(directory), is_trainable=True, config=config
        )
    except (RuntimeError, ValueError, KeyError) as exc:
        raise ValueError(
            f"model.init_adapter: {directory} does not fit model "
            f"{getattr(model.config, 'name_or_path', '?')!r} (trained on "
            f"{config.base_model_name_or_path!r}?): {exc}"
        ) from None
    peft_model.train()
    trainable, total = count_parameters(peft_model)
    logger.info(
        "LoRA adapter loaded from %s (model.init_adapter): %d trainable of %d parameters",
        directory,
        trainable,
        total,
    )
    return peft_model


__all__ = ["adapter_dir", "check_adapter_shape", "load_init_adapter"]
