"""Export a checkpoint as one standard Hugging Face model folder: the run's base model with the
LoRA adapter merged in (peft ``merge_and_unload``).

The folder holds ``config.json``, ``generation_config.json``, ``model.safetensors`` and the
tokenizer files (``tokenizer.json``, ``tokenizer_config.json``, the chat template): it loads with
``AutoModelForCausalLM.from_pretrained(OUT)`` / ``AutoTokenizer.from_pretrained(OUT)`` and serves
with vLLM, TGI or llama.cpp's converter like any Hugging Face checkpoint. The base model is the
one in the run's config.yaml (the embedded GGUF default is dequantized; ``tiny-random`` is
rebuilt from the run's seed); the merge is done in float32 and the result saved in the run's
``model.dtype`` unless another dtype is asked for. ``flowgrpo_export.json`` records where it
came from.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch
from peft import PeftModel

from flowgrpo.files import remove
from flowgrpo.trainer.loop.checkpoint import follow_umask
from flowgrpo.trainer.loop.rundir import load_run_config
from flowgrpo.trainer.reports.evaluate import ModelSpec, checkpoint_adapter, load_base_model

logger = logging.getLogger(__name__)

EXPORT_INFO = "flowgrpo_export.json"


def check_export_target(out: str | Path, checkpoint: str | Path | None, overwrite: bool) -> Path:
    """``out`` as a Path when it may be written: absent or empty, or, with ``overwrite``, an
    earlier export (its :data:`EXPORT_INFO` lists what it wrote, and only that is replaced);
    never the checkpoint's run folder or a folder holding it.

    Raises:
        FileExistsError: a file is there; a non-empty folder without ``overwrite``; with
            ``overwrite``, a non-empty folder no export wrote (nothing says which files are
            whose: a command deletes only what it wrote).
        ValueError: ``out`` holds the checkpoint.
    """
    out = Path(out)
    if checkpoint is not None:
        run_dir = Path(checkpoint).resolve().parent
        if out.resolve() in (Path(checkpoint).resolve(), run_dir, *run_dir.parents):
            raise ValueError(
                f"--merge {out}: that folder holds the checkpoint; choose a new folder"
            )
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"--merge {out}: a file is there; choose a folder")
    if not out.is_dir() or not any(out.iterdir()):
        return out
    if not overwrite:
        raise FileExistsError(
            f"--merge {out}: the folder is not empty; choose a new one, or pass --overwrite "
            "if it holds an earlier export (its files are replaced, nothing else is touched)"
        )
    _written_before(out)  # raises unless an export wrote the folder
    return out


def _written_before(out: Path) -> list[str]:
    """The names an earlier export wrote in ``out`` (its :data:`EXPORT_INFO` lists them)."""
    refuse = (
        f"--merge {out} --overwrite: no export of this version wrote that folder (no "
        f"{EXPORT_INFO} listing its files), so nothing shows which files are whose; "
        "choose a new folder, or empty it yourself"
    )
    try:
        files = json.loads((out / EXPORT_INFO).read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        raise FileExistsError(refuse) from None
    if not isinstance(files, list) or not all(_plain_name(f) for f in files):
        raise FileExistsError(refuse)
    return files


def _plain_name(name) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name


def export_merged(
    checkpoint: str | Path,
    out: str | Path,
    device: str = "cpu",
    dtype: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Merge the adapter of ``checkpoint`` (RUN_DIR/checkpoint-N) into the run's base model and
    save a standard model folder at ``out``; returns ``out``."""
    adapter = checkpoint_adapter(checkpoint)
    run_config = load_run_config(checkpoint)
    out = check_export_target(out, checkpoint, overwrite)
    spec = ModelSpec.of_run(run_config)
    target = dtype or spec.dtype
    base, tokenizer = load_base_model(ModelSpec(**{**vars(spec), "dtype": "float32"}), device)
    merged = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
    merged = merged.to(dtype=getattr(torch, target))
    info = {
        "checkpoint": str(Path(checkpoint).resolve()),
        "base_model": spec.name_or_path,
        "gguf_file": spec.gguf_file,
        "dtype": target,
        "lora": {"r": run_config.lora.r, "alpha": run_config.lora.alpha},
    }
    _save(merged, tokenizer, out, info)
    logger.info("merged %s into %s: %s", adapter, spec.name_or_path, out)
    return out


def export_base(
    model: str = "default",
    out: str | Path = "",
    dtype: str = "float32",
    gguf_file: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Save ``model`` itself (no adapter) as a standard model folder at ``out``; returns ``out``.

    For servers that read Hugging Face folders but not this GGUF file: ``transformers serve``
    finds no architecture in the embedded SmolLM2 GGUF's config (docs/PRODUCTION.md), while
    the folder written here (dequantized by transformers, as training loads it) serves as is.
    """
    out = check_export_target(out, None, overwrite)
    base, tokenizer = load_base_model(ModelSpec(model, gguf_file, dtype), "cpu")
    info = {"checkpoint": None, "base_model": model, "gguf_file": gguf_file, "dtype": dtype}
    _save(base, tokenizer, out, info)
    logger.info("exported %s: %s", model, out)
    return out


def _save(model, tokenizer, out: Path, info: dict) -> None:
    """Write ``model``, ``tokenizer`` and ``info`` (EXPORT_INFO, with the names written) to the
    folder ``out``, after removing what an earlier export wrote there (and nothing else)."""
    model.config.name_or_path = str(out)
    if out.is_dir() and any(out.iterdir()):
        for name in _written_before(out):
            remove(out / name)
    out.mkdir(parents=True, exist_ok=True)
    before = {p.name for p in out.iterdir()}
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    written = sorted({p.name for p in out.iterdir()} - before - {EXPORT_INFO})
    for name in written:  # safetensors writes 0600; a file of the user's keeps its mode
        follow_umask(out, only=name)
    info = {**info, "files": [*written, EXPORT_INFO]}
    (out / EXPORT_INFO).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
