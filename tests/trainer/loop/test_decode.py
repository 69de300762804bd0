"""The decoding loop that drops ended rows, against ``generate`` on the same prefilled cache."""

from types import SimpleNamespace

import pytest
import torch
from transformers import LogitsProcessor

from flowgrpo.operators.models import build_tiny_model
from flowgrpo.operators.tasks.base import Problem
from flowgrpo.trainer.loop import decode as decode_module
from flowgrpo.trainer.loop.decode import decode
from flowgrpo.trainer.loop.policy import wrap_lora
from flowgrpo.trainer.loop.prompt import PolicyPrompt
from flowgrpo.trainer.loop.rollout import _left_padded, generate_rollout, prefill_prompts
from flowgrpo.trainer.loop.sampler import InverseCdfSampler

LORA = SimpleNamespace(r=4, alpha=8, dropout=0.0, target_modules=("q_proj", "v_proj"))
PROBLEMS = [
    Problem("a", "math", "What is 2 + 2?", "4"),
    Problem("b", "math", "Tom has 3 apples and buys 12 more. How many now?", "15"),
]
K, EOS, PAD = 4, 2, 0


class EndAt(LogitsProcessor):
    """Row i writes the end token at the step ``ends[i]`` (None: never) and nowhere else;
    records how many rows each call saw."""

    def __init__(self, ends, prompt_width):
        self.ends, self.width, self.rows = ends, prompt_width, []

    def __call__(self, input_ids, scores):
        step = input_ids.shape[1] - self.width
        self.rows.append(scores.shape[0])
        scores = scores.clone()
        scores[:, EOS] = -float("inf")
        for i, end in enumerate(self.ends):
            if end == step:
                scores[i] = -float("inf")
                scores[i, EOS] = 0.0
        return scores


def setup(max_new):
    model, tok = build_tiny_model(seed=1)
    torch.manual_seed(0)  # LoRA's A: the same model at every call
    model = wrap_lora(model, LORA)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.5)
    model.eval()
    prompt = PolicyPrompt()
    texts = [prompt.render(p, tok) for p in PROBLEMS]
    ids = [torch.tensor(tok(t, add_special_tokens=False)["input_ids"]) for t in texts]
    enc = _left_padded(tok, texts)
    ids_NW = enc["input_ids"].repeat_interleave(K, dim=0)
    mask_NW = enc["attention_mask"].repeat_interleave(K, dim=0)
    with torch.no_grad():
        cache = prefill_prompts(model, ids, K, max_new)
    return model, ids_NW, mask_NW, cache


def both(ends, max_new, sample_seed=None):
    """(decode's ids, generate's ids, decode's processor, generate's) on the same prefilled
    prompts; with ``sample_seed`` each samples by inverse CDF from the same global seed."""
    out = []
    for loop in ("decode", "generate"):
        model, ids_NW, mask_NW, cache = setup(max_new)
        processors = [EndAt(ends, ids_NW.shape[1])]
        if sample_seed is not None:
            processors.append(InverseCdfSampler())
            torch.manual_seed(sample_seed)
        with torch.no_grad():
            if loop == "decode":
                got = decode(model, ids_NW, mask_NW, cache, processors, max_new, [EOS], PAD)
            else:
                got = model.generate(
                    input_ids=ids_NW, attention_mask=mask_NW, cache=cache, do_sample=False,
                    logits_processor=processors, max_new_tokens=max_new, eos_token_id=[EOS],
                    pad_token_id=PAD,
                )  # fmt: skip
        out.append((got, processors))
    return out


@pytest.mark.parametrize("sample_seed", [None, 7])
def test_rows_ending_at_different_steps_get_generates_tokens(sample_seed):
    """Greedy and sampled (the sampler's random stream included): every token, every pad after
    a row's end, and the width, as ``generate`` writes them."""
    ends = [0, 0, 1, 1, 2, 2, None, 4]
    (mine, mine_p), (ref, ref_p) = both(ends, 6, sample_seed)
    assert mine.shape == ref.shape
    assert torch.equal(mine, ref)
    width = mine.shape[1] - 6
    assert mine[0, width:].tolist() == [EOS, PAD, PAD, PAD, PAD, PAD]
    if sample_seed is not None:
        for step, (a, b) in enumerate(zip(mine_p[1].logp, ref_p[1].logp)):
            live = torch.tensor([end is None or step <= end for end in ends])
            assert torch.allclose(a[live], b[live], atol=1e-5)  # an ended row's draw is dropped


def test_ended_rows_stop_being_computed_and_processors_still_see_every_row():
    """Rows 0-5 end at steps 0, 0, 1, 1, 2, 2: with DROP_SHARE 0.25 the cache loses them as soon
    as they end (2 of 8, 2 of 6, 2 of 4), so the model computes 8, 6, 4, 2, 2, 2 rows; every
    processor call still gets all 8 (the sampler's stream does not depend on who ended)."""
    assert decode_module.DROP_SHARE == 0.25
    model, ids_NW, mask_NW, cache = setup(6)
    fed = []
    model.get_base_model().register_forward_pre_hook(
        lambda mod, args, kw: fed.append(kw["input_ids"].shape[0]), with_kwargs=True
    )
    end_at = EndAt([0, 0, 1, 1, 2, 2, None, None], ids_NW.shape[1])
    with torch.no_grad():
        decode(model, ids_NW, mask_NW, cache, [end_at], 6, [EOS], PAD)
    assert fed == [8, 6, 4, 2, 2, 2]
    assert end_at.rows == [8] * 6
    assert all(layer.keys.shape[0] == 2 for layer in cache.layers)


def test_rows_are_kept_until_enough_have_ended():
    """One row of 8 ending is under a quarter: it stays in the cache (and is computed) until a
    second one ends."""
    model, ids_NW, mask_NW, cache = setup(5)
    fed = []
    model.get_base_model().register_forward_pre_hook(
        lambda mod, args, kw: fed.append(kw["input_ids"].shape[0]), with_kwargs=True
    )
    with torch.no_grad():
        decode(model, ids_NW, mask_NW, cache, [EndAt([0, None, None, 2, None, None, None, None],
               ids_NW.shape[1])], 5, [EOS], PAD)  # fmt: skip
    assert fed == [8, 8, 8, 6, 6]


def test_when_every_row_ends_at_once_one_token_is_written():
    (mine, _), (ref, _) = both([0] * 8, 5)
    assert torch.equal(mine, ref)
    assert mine.shape[1] == ref.shape[1] and (mine[:, -1] == EOS).all()


def test_a_growing_cache_decodes_the_same():
    """With ``max_new_tokens`` 0 the prefill makes a DynamicCache: rows are dropped from it too."""
    model, ids_NW, mask_NW, cache = setup(0)
    ends = [0, 0, 1, 1, 2, 2, None, 4]
    with torch.no_grad():
        mine = decode(model, ids_NW, mask_NW, cache, [EndAt(ends, ids_NW.shape[1])], 6, [EOS], PAD)
    _, (ref, _) = both(ends, 6)
    assert torch.equal(mine, ref)


@pytest.mark.parametrize("temperature", [0.0, 1.3])
def test_the_rollout_with_and_without_dropping_ended_rows(temperature):
    """generate_rollout end to end (merged LoRA, packed weights, the sampler): the same
    completions and, to rounding, the same sampler log-probs either way."""
    model, *_ = setup(0)
    _, tok = build_tiny_model(seed=1)
    model.generation_config.eos_token_id = EOS
    runs = []
    for drop in (True, False):
        torch.manual_seed(11)
        runs.append(generate_rollout(model, tok, PROBLEMS, K, temperature, 1.0, 10,
                                     drop_ended=drop))  # fmt: skip
    a, b = runs
    assert torch.equal(a.completion_ids_NT, b.completion_ids_NT)
    assert a.texts == b.texts
    if temperature > 0:
        assert torch.allclose(a.sampler_logp_NT, b.sampler_logp_NT, atol=1e-5)


def test_without_an_end_token_every_row_runs_the_whole_budget():
    model, ids_NW, mask_NW, cache = setup(5)
    with torch.no_grad():
        out = decode(model, ids_NW, mask_NW, cache, [], 5, [], PAD)
    assert out.shape == (8, ids_NW.shape[1] + 5)
    assert all(layer.keys.shape[0] == 8 for layer in cache.layers), "no row was dropped"


def test_without_a_pad_token_an_ended_row_continues_with_the_end_token():
    """As ``generate`` does when the tokenizer has no pad token."""
    model, ids_NW, mask_NW, cache = setup(4)
    end_at = EndAt([0, None, None, None, None, None, None, None], ids_NW.shape[1])
    with torch.no_grad():
        out = decode(model, ids_NW, mask_NW, cache, [end_at], 4, [EOS], None)
    assert out[0, ids_NW.shape[1] :].tolist() == [EOS] * 4
