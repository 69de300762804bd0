"""A sampling executor's per-request seeds (operators/llm.request_seed) and the per-row
Gumbel-max sampler the HF backend draws with (operators/seeded_sampling)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from flowgrpo.operators.llm import GenerationRequest, RequestContext, request_seed, user


def seeded(problem="p1", op="Custom", call=0, repeat=0, text="q"):
    context = RequestContext(op, SimpleNamespace(id=problem), call, repeat)
    return GenerationRequest(user(text), context=context)


def test_equal_contexts_give_equal_seeds_whatever_the_prompt():
    assert request_seed(0, seeded(text="a")) == request_seed(0, seeded(text="b"))


@pytest.mark.parametrize(
    "other",
    [
        {"repeat": 1},  # the repeats of one workflow draw afresh
        {"call": 1},  # identical prompts within one run draw differently
        {"op": "Review"},
        {"problem": "p2"},
    ],
)
def test_each_part_of_the_context_changes_the_seed(other):
    assert request_seed(0, seeded()) != request_seed(0, seeded(**other))


def test_the_base_seed_changes_every_seed_and_seeds_fit_a_server():
    seeds = [request_seed(base, seeded(repeat=r)) for base in (0, 1) for r in range(50)]
    assert len(set(seeds)) == 100
    assert all(0 <= s < 2**31 for s in seeds)


def test_a_request_without_context_is_seeded_from_its_messages():
    a, b = GenerationRequest(user("a")), GenerationRequest(user("b"))
    assert request_seed(0, a) == request_seed(0, GenerationRequest(user("a")))
    assert request_seed(0, a) != request_seed(0, b)


def test_seeds_are_the_same_in_another_process_with_another_hash_salt():
    code = (
        "from types import SimpleNamespace as N;"
        "from flowgrpo.operators.llm import GenerationRequest as G, RequestContext as C,"
        " request_seed, user;"
        "print(request_seed(7, G(user('q'), context=C('Custom', N(id='p1'), 2, 1))))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == request_seed(7, seeded(call=2, repeat=1))


def test_gumbel_draws_follow_the_softmax_at_the_temperature():
    import torch  # heavy: torch

    from flowgrpo.operators.seeded_sampling import GumbelSampler

    logits_V = torch.tensor([2.0, 1.0, 0.0, -1.0, 0.5])
    temperature, rows = 0.7, 20_000
    sampler = GumbelSampler(range(rows), temperature)
    out_NV = sampler(None, logits_V.expand(rows, -1).clone())
    assert torch.all((out_NV == 0).sum(dim=1) == 1)  # one token left per row
    counts_V = (out_NV == 0).sum(dim=0).double()
    # the law computed by hand, not by the sampler: exp(l / T) normalised
    weights = [math.exp(v / temperature) for v in logits_V.tolist()]
    expected_V = torch.tensor([w / sum(weights) for w in weights], dtype=torch.double)
    sd_V = (expected_V * (1 - expected_V) / rows).sqrt()
    assert torch.all((counts_V / rows - expected_V).abs() < 5 * sd_V), counts_V / rows


def test_a_rows_draws_do_not_depend_on_its_batch_or_the_global_generator():
    import torch  # heavy: torch

    from flowgrpo.operators.seeded_sampling import GumbelSampler

    scores_V = torch.randn(40)
    before = torch.get_rng_state()
    alone = GumbelSampler([11], 1.0)
    pair = GumbelSampler([5, 11], 1.0)
    steps_alone = [alone(None, scores_V[None].clone()).argmax(1).item() for _ in range(6)]
    steps_pair = [pair(None, scores_V.expand(2, -1).clone()).argmax(1)[1].item() for _ in range(6)]
    assert steps_alone == steps_pair
    assert len(set(steps_alone)) > 1  # each step draws afresh from the row's generator
    assert torch.equal(torch.get_rng_state(), before)


def test_the_sampler_refuses_greedy_and_a_batch_of_another_size():
    import torch  # heavy: torch

    from flowgrpo.operators.seeded_sampling import GumbelSampler

    with pytest.raises(ValueError, match="temperature must be > 0"):
        GumbelSampler([0], 0.0)
    with pytest.raises(ValueError, match="3 rows in the batch, 2 seeds"):
        GumbelSampler([0, 1], 1.0)(None, torch.zeros(3, 4))
