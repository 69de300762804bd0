"""A tiny GGUF file for tests of the GGUF load path: a one-block Llama of random weights (F32)
with a byte-level BPE tokenizer of 261 tokens and a chat template. transformers converts it in
about a second, where the embedded SmolLM2 file takes 20-30 s (most of it its 49,152-token
tokenizer), so a test that must convert (the converted copy off) stays cheap."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
from transformers.convert_slow_tokenizer import bytes_to_unicode

NAME = "tiny-llama.gguf"
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
HIDDEN, FF, HEADS, KV_HEADS = 64, 128, 4, 2


def _tokenizer(w: gguf.GGUFWriter) -> int:
    tokens = SPECIALS + list(bytes_to_unicode().values()) + ["Ġt", "he"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types([3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS)))
    w.add_token_merges(["Ġ t", "h e"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_pad_token_id(2)
    w.add_chat_template(CHAT)
    return len(tokens)


def _shapes(vocab: int) -> dict[str, tuple[int, ...]]:
    kv = KV_HEADS * HIDDEN // HEADS
    return {
        "token_embd.weight": (vocab, HIDDEN), "output_norm.weight": (HIDDEN,),
        "blk.0.attn_norm.weight": (HIDDEN,), "blk.0.ffn_norm.weight": (HIDDEN,),
        "blk.0.attn_q.weight": (HIDDEN, HIDDEN), "blk.0.attn_k.weight": (kv, HIDDEN),
        "blk.0.attn_v.weight": (kv, HIDDEN), "blk.0.attn_output.weight": (HIDDEN, HIDDEN),
        "blk.0.ffn_gate.weight": (FF, HIDDEN), "blk.0.ffn_up.weight": (FF, HIDDEN),
        "blk.0.ffn_down.weight": (HIDDEN, FF),
    }  # fmt: skip


def write_tiny_gguf(folder: Path) -> tuple[str, str]:
    """Write the file into ``folder``; returns (folder, file name) for ``load_model``."""
    folder.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(folder / NAME), "llama")
    w.add_block_count(1)
    w.add_context_length(256)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(HIDDEN // HEADS)
    w.add_file_type(0)
    vocab = _tokenizer(w)
    w.add_vocab_size(vocab)
    rng = np.random.default_rng(0)
    for name, shape in _shapes(vocab).items():
        norm = name.endswith("norm.weight")
        data = np.ones(shape) if norm else rng.standard_normal(shape) * 0.02
        w.add_tensor(name, data.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(folder), NAME
