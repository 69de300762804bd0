"""``tiny-random``: a tiny randomly initialised Llama with a character-level tokenizer.

For tests, smoke runs and ``configs/tiny.yaml``: built from a config in code, no download, loads
in milliseconds. It can emit every character of the DSL (so rewards and extraction are exercised
for real), but being untrained it writes noise.
"""

from __future__ import annotations

import string

TINY_NAME = "tiny-random"
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def build_tiny_tokenizer():
    """A character-level fast tokenizer over printable ASCII with <pad>, <s>, </s>, <unk>."""
    # heavy: tokenizers and transformers, imported on first use so flowgrpo.operators stays light
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
    """(model, tokenizer): a random LlamaForCausalLM small enough for unit tests on a CPU."""
    # heavy: torch and transformers (see build_tiny_tokenizer)
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
