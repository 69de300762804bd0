"""The inverse-CDF draw that replaces generate's torch.multinomial: the same distribution as a
softmax computed by hand, never a token of probability 0, and the whole rollout's first token
distributed as the model's own tempered next-token probabilities."""

import math

import pytest
import torch

from flowgrpo.operators.models import build_tiny_model
from flowgrpo.operators.tasks.base import Problem
from flowgrpo.trainer.loop.prompt import PolicyPrompt
from flowgrpo.trainer.loop.rollout import generate_rollout
from flowgrpo.trainer.loop.sampler import InverseCdfSampler

INF = float("inf")
ROWS = [[1.0, 0.0, -INF, 2.5, -1.0, -INF], [-INF, -INF, 0.3, -INF, -INF, -INF]]


def _by_hand(row):
    weights = [0.0 if s == -INF else math.exp(s) for s in row]
    return [w / sum(weights) for w in weights]


def test_draws_follow_the_softmax_computed_by_hand_and_skip_impossible_tokens():
    torch.manual_seed(0)
    n = 20_000
    scores = torch.tensor(ROWS).repeat_interleave(n, dim=0)
    out = InverseCdfSampler()(torch.zeros(2 * n, 1, dtype=torch.long), scores)
    assert torch.equal((out == 0).sum(-1), torch.ones(2 * n, dtype=torch.long))  # one token each
    assert torch.isneginf(out).sum() == 2 * n * 5
    drawn = out.argmax(-1).view(2, n)
    for r, row in enumerate(ROWS):
        freq = torch.bincount(drawn[r], minlength=6).double() / n
        for token, p in enumerate(_by_hand(row)):
            if p == 0:
                assert freq[token] == 0, (r, token)
            else:  # 5 standard errors
                assert abs(freq[token] - p) < 5 * math.sqrt(p * (1 - p) / n) + 1e-9, (r, token)


def test_a_row_with_nothing_left_to_sample_is_an_error():
    scores = torch.tensor([[0.0, 1.0], [-INF, -INF]])
    with pytest.raises(ValueError, match="no token left to sample"):
        InverseCdfSampler()(torch.zeros(2, 1, dtype=torch.long), scores)


def test_a_seeded_draw_repeats():
    scores = torch.randn(4, 50)
    draws = []
    for _ in range(2):
        torch.manual_seed(3)
        draws.append(InverseCdfSampler()(None, scores).argmax(-1))
    assert torch.equal(*draws)


@pytest.mark.parametrize("temperature", [0.7, 1.3])
def test_a_rollouts_first_token_follows_the_models_tempered_probabilities(temperature):
    model, tok = build_tiny_model(seed=5)
    problem = Problem("p", "math", "What is 2 + 2?", "4")
    ids = tok(PolicyPrompt().render(problem, tok), add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        probs = torch.softmax(model(torch.tensor([ids])).logits[0, -1] / temperature, -1)
    torch.manual_seed(0)
    n = 4000
    r = generate_rollout(model, tok, [problem], n, temperature, 1.0, 1)
    freq = torch.bincount(r.completion_ids_NT[:, 0], minlength=probs.numel()).double() / n
    likely = probs > 0.01
    assert likely.sum() >= 3
    se = (probs * (1 - probs) / n).sqrt()
    assert ((freq - probs).abs()[likely] < 5 * se[likely]).all()
    assert freq[~likely].sum() == pytest.approx(probs[~likely].sum().item(), abs=0.02)
