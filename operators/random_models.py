"""Randomly initialised models of real architectures: ``random:<shape>`` model names.

No weights can be downloaded where the GPU measurements run (``scripts/gpu_check.py``), so the
production shapes are built from their config with random weights: the same parameter count,
memory and FLOPs as the real model, none of its skill. A random model writes noise; to let the
reward still vary (and the update run), :func:`build_workflow_tokenizer` gives it a vocabulary
whose every token decodes to a piece of the workflow DSL (an operator name, ``->``, ``?``,
``:``, ``done``, brackets, a newline), so its noise is DSL soup: mostly syntax errors, some
valid workflows, some prose-free fallbacks, a reward that differs within a group.

Shapes (:data:`SHAPES`) copy the config.json fields of the public checkpoints they are named for
(Qwen2.5-7B-Instruct, Qwen2.5-1.5B-Instruct, SmolLM2-135M-Instruct); ``tiny-qwen2`` is a few
thousand parameters of the same Qwen2 architecture, for the CPU test of the GPU script.
"""

from __future__ import annotations

import string
from typing import Any

#: The prefix that names a random model of a known shape (``random:qwen2.5-7b``).
RANDOM_PREFIX = "random:"

#: Architectures by shape name: the config fields that set the size of the model.
SHAPES: dict[str, dict[str, Any]] = {
    "qwen2.5-7b": {
        "model_type": "qwen2",
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "tie_word_embeddings": False,
        "rope_theta": 1_000_000.0,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 32768,
    },
    "qwen2.5-1.5b": {
        "model_type": "qwen2",
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
        "rope_theta": 1_000_000.0,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 32768,
    },
    "smollm2-135m": {
        "model_type": "llama",
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "vocab_size": 49152,
        "tie_word_embeddings": True,
        "rope_theta": 100000.0,
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 8192,
    },
    "tiny-qwen2": {
        "model_type": "qwen2",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 512,
        "tie_word_embeddings": False,
        "rope_theta": 10000.0,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 4096,
    },
}

#: What a token of the workflow vocabulary decodes to (besides the special tokens).
DSL_PIECES = (
    "Custom",
    "AnswerGenerate",
    "Programmer",
    "ScEnsemble",
    "Review",
    "Revise",
    "Format",
    " -> ",
    "->",
    " ? ",
    " : ",
    "done",
    "[",
    "]",
    ", ",
    " ",
    "\n",
)
_SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")


def is_random_name(name_or_path: str) -> bool:
    """Whether ``name_or_path`` names a random model (``random:<shape>``)."""
    return isinstance(name_or_path, str) and name_or_path.startswith(RANDOM_PREFIX)


def random_shape(name_or_path: str) -> dict[str, Any]:
    """The :data:`SHAPES` entry of ``random:<shape>``; a ValueError listing the shapes."""
    shape = name_or_path[len(RANDOM_PREFIX) :]
    if shape not in SHAPES:
        raise ValueError(
            f"unknown random model shape {shape!r}: choose one of "
            + ", ".join(RANDOM_PREFIX + s for s in SHAPES)
        )
    return SHAPES[shape]


def build_workflow_tokenizer(vocab_size: int):
    """A tokenizer of exactly ``vocab_size`` tokens: text in, DSL pieces out.

    Ids 0-3 are ``<pad> <s> </s> <unk>``, then every printable character, then (when
    ``vocab_size`` leaves room) every pair of printable characters; text is split into pairs, so
    a prompt encodes without loss (problems stay distinct, a shared prefix stays as long as the
    text's) in about half its characters, the order of a BPE tokenizer's count (about a quarter).
    Every further id decodes to one of :data:`DSL_PIECES` in turn (the vocabulary entry
    ``piece#id``, the ``#id`` removed by the decoder), so a random model sampling near uniformly
    over a large vocabulary writes mostly DSL pieces. No chat template: :func:`load_model`
    gives it the one of every built-in model.
    """
    # heavy: tokenizers and transformers, imported on first use (as operators.models does)
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab: dict[str, int] = {}
    for token in (*_SPECIALS, *string.printable):
        vocab.setdefault(token, len(vocab))
    if vocab_size < len(vocab) + len(DSL_PIECES):
        raise ValueError(f"vocab_size must be at least {len(vocab) + len(DSL_PIECES)}")
    chars = list(vocab)[len(_SPECIALS) :]
    pairs = vocab_size >= len(vocab) + len(chars) ** 2 + len(DSL_PIECES)
    for pair in (a + b for a in chars for b in chars) if pairs else ():
        vocab.setdefault(pair, len(vocab))
    while len(vocab) < vocab_size:
        i = len(vocab)
        vocab[f"{DSL_PIECES[i % len(DSL_PIECES)]}#{i}"] = i
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    chunk = r"[\s\S]{1,2}" if pairs else r"[\s\S]"
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(chunk), behavior="isolated")
    tok.decoder = decoders.Sequence([decoders.Replace(Regex(r"#[0-9]+"), ""), decoders.Fuse()])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
        pad_token="<pad>",
    )  # fmt: skip
    return tokenizer


def build_random_model(name_or_path: str, seed: int, dtype, device: str = "cpu"):
    """(model of the shape named, in ``dtype`` on ``device``, in eval mode; its tokenizer).

    The weights are initialised on ``device`` directly (a 7B model in seconds on a GPU, no CPU
    copy) and fixed by ``seed`` without touching the global RNG.
    """
    # heavy: torch and transformers (see build_workflow_tokenizer)
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    shape = dict(random_shape(name_or_path))
    model_type = shape.pop("model_type")
    tokenizer = build_workflow_tokenizer(shape["vocab_size"])
    config = AutoConfig.for_model(
        model_type, **shape, bos_token_id=1, eos_token_id=2, pad_token_id=0
    )
    with torch.random.fork_rng():  # every visible device's generator is restored afterwards
        torch.manual_seed(seed)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.generation_config.eos_token_id = 2
    model.generation_config.pad_token_id = 0
    model.config.name_or_path = name_or_path
    return model.eval(), tokenizer
