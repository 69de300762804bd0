"""random:<shape> models: real architectures with random weights and a tokenizer whose every
token beyond the text ones decodes to a piece of the workflow DSL."""

from __future__ import annotations

import pytest
import torch

from flowgrpo.configuration import ConfigError
from flowgrpo.operators.models import load_model
from flowgrpo.operators.random_models import (
    DSL_PIECES,
    SHAPES,
    build_workflow_tokenizer,
    random_shape,
)
from flowgrpo.trainer.config import load_config


@pytest.mark.parametrize("vocab_size", [512, 20_000])
def test_the_tokenizer_has_exactly_the_model_vocabulary(vocab_size):
    tokenizer = build_workflow_tokenizer(vocab_size)
    assert len(tokenizer) == vocab_size
    assert tokenizer.convert_ids_to_tokens(vocab_size - 1) is not None


@pytest.mark.parametrize("vocab_size", [512, 20_000])  # characters only / character pairs
def test_text_encodes_without_loss(vocab_size):
    tokenizer = build_workflow_tokenizer(vocab_size)
    text = "Tom has 12 apples.\nWorkflow: Custom -> Review ? Revise : done"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.unk_token_id not in ids
    assert tokenizer.decode(ids) == text


def test_pairs_make_a_prompt_about_half_its_characters_long():
    text = "Alice buys 3 pens at 2 dollars each. How much does she pay?"
    ids = build_workflow_tokenizer(20_000)(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == (len(text) + 1) // 2


def test_every_token_past_the_text_ones_decodes_to_a_dsl_piece():
    tokenizer = build_workflow_tokenizer(20_000)
    for i in range(19_000, 19_040):
        assert tokenizer.decode([i]) in DSL_PIECES


def test_a_too_small_vocabulary_is_refused():
    with pytest.raises(ValueError, match="vocab_size must be at least"):
        build_workflow_tokenizer(50)


def test_an_unknown_shape_lists_the_shapes():
    with pytest.raises(ValueError, match=r"random:qwen2\.5-7b"):
        random_shape("random:gpt-5")
    with pytest.raises(ConfigError, match=r"model\.name_or_path.*random:tiny-qwen2"):
        load_config(None, ("model.name_or_path=random:gpt-5",))


def test_the_7b_shape_is_qwen2_5_7b():
    shape = SHAPES["qwen2.5-7b"]
    assert (shape["hidden_size"], shape["intermediate_size"], shape["num_hidden_layers"]) == (
        3584,
        18944,
        28,
    )
    assert (shape["num_attention_heads"], shape["num_key_value_heads"]) == (28, 4)
    assert shape["vocab_size"] == 152064 and shape["tie_word_embeddings"] is False


def test_load_model_builds_the_shape_seeded_in_the_dtype():
    a, tokenizer = load_model("random:tiny-qwen2", dtype="bfloat16", seed=3)
    b, _ = load_model("random:tiny-qwen2", dtype="bfloat16", seed=3)
    c, _ = load_model("random:tiny-qwen2", dtype="bfloat16", seed=4)
    assert a.config.model_type == "qwen2" and a.config.hidden_size == 64
    assert next(a.parameters()).dtype == torch.bfloat16
    assert a.get_output_embeddings().weight.shape == (512, 64) and len(tokenizer) == 512
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.lm_head.weight, c.lm_head.weight)


def test_a_random_model_writes_dsl_pieces():
    model, tokenizer = load_model("random:tiny-qwen2", seed=0)
    ids = tokenizer("Workflow:", return_tensors="pt")["input_ids"]
    torch.manual_seed(0)
    out = model.generate(ids, do_sample=True, max_new_tokens=40, min_new_tokens=40, top_k=0)
    text = tokenizer.decode(out[0, ids.shape[1] :])
    assert any(op in text for op in ("Custom", "Programmer", "Review", "->"))
