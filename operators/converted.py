"""A converted copy of a GGUF model, kept so that the next load skips the conversion.

transformers reads a GGUF file (``from_pretrained(..., gguf_file=)``) by parsing its metadata
twice, vocabulary included, building a tensor-name map per tensor and dequantizing every weight:
about 24 s for the embedded SmolLM2-135M on a 2-core CPU, paid by every command and every study
process. The dequantized model and its tokenizer, written once with ``save_pretrained``, load in
about 2 s with the same weights, vocabulary and chat template (tests/operators/test_converted.py).

Where: ``$FLOWGRPO_CACHE`` (``off`` turns the copy off), else ``$XDG_CACHE_HOME/flowgrpo``, else
``~/.cache/flowgrpo``; one folder per GGUF file (its path, size and modification time), dtype
and transformers version, ~0.55 GB for SmolLM2-135M in float32. A new file, dtype or
transformers release converts again into a folder of its own; delete the cache folder to reclaim
the space. A copy that fails to load is reported and converted again; a cache that cannot be
written is reported and the load goes on without it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)

CACHE_ENV = "FLOWGRPO_CACHE"
FORMAT = 1  # raised when what is written into a converted folder changes
_DONE = "flowgrpo-converted.json"  # written last: a folder without it is not a complete copy


def cache_root() -> Path | None:
    """The cache folder (None: ``$FLOWGRPO_CACHE`` is ``off``)."""
    value = os.environ.get(CACHE_ENV)
    if value is not None:
        if value.strip().lower() in ("", "off", "0", "false", "none"):
            return None
        return Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "flowgrpo"


def converted_folder(directory: str, gguf_file: str, dtype: str) -> Path | None:
    """Where the converted copy of ``directory/gguf_file`` in ``dtype`` lives (None: the copy
    is off, or the file is not a local one)."""
    root = cache_root()
    if root is None:
        return None
    # heavy: transformers' version is part of the key (its conversion may change)
    import transformers

    file = (Path(directory).expanduser() / gguf_file).resolve()
    if not file.is_file():  # a hub id: transformers' own cache holds the file
        return None
    stat = file.stat()
    key = [str(file), stat.st_size, stat.st_mtime_ns, dtype, transformers.__version__, FORMAT]
    digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]
    return root / "converted" / f"{file.stem}-{dtype}-{digest}"


def load_converted(folder: Path, torch_dtype, source: str):
    """(model, tokenizer) from a complete converted copy; None when there is none or it does
    not load (reported: the caller converts again). The model keeps ``source`` (the GGUF file's
    folder) as its name, as a conversion gives it: adapters record it as their base."""
    if not (folder / _DONE).is_file():
        return None
    # heavy: transformers, as load_model imports it
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch_dtype)
    except (OSError, ValueError, RuntimeError) as exc:
        logger.warning("the converted model in %s does not load (%s); converting the GGUF "
                       "file again (delete that folder to stop this)", folder, exc)  # fmt: skip
        return None
    model.config._name_or_path = model.name_or_path = source
    return model, tokenizer


def save_converted(model, tokenizer, folder: Path, source: str) -> bool:
    """Write the copy into a temporary folder beside ``folder`` and rename it into place, so a
    reader never sees half a copy and two processes converting at once keep one. False (and a
    warning) when the cache cannot be written: the run goes on without it."""
    part = None
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        part = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}-"))
        model.save_pretrained(str(part))
        tokenizer.save_pretrained(str(part))
        (part / _DONE).write_text(json.dumps({"source": source, "format": FORMAT}) + "\n")
        os.rename(part, folder)  # fails when another process got there first: keep theirs
        part = None
        size = sum(f.stat().st_size for f in folder.iterdir()) / 1e9
        logger.info("kept the converted model in %s (%.2f GB; later loads read it, %s=off "
                    "to skip)", folder, size, CACHE_ENV)  # fmt: skip
    except OSError as exc:
        if not (folder / _DONE).is_file():
            logger.warning("could not keep the converted model in %s (%s); the next load "
                           "converts the GGUF file again (set %s=off to skip this)",
                           folder.parent, exc, CACHE_ENV)  # fmt: skip
            return False
    finally:
        if part is not None:
            shutil.rmtree(part, ignore_errors=True)  # only the temporary folder this wrote
    return True
