"""One extension per recipe of docs/EXTENDING.md, written as a user would write them in their
own package: plain functions (and a backend class), no registration at import time (the caller
registers them, names them by dotted path in the config, or imports the plugin
:mod:`my_ext.registered`, which registers them).

The code of each function is the code the recipe shows; tests/recipes/test_recipes.py runs it.
"""

from __future__ import annotations

import random

import numpy as np
import torch

from flowgrpo.operators.custom import call_llm
from flowgrpo.operators.llm import GenerationResult
from flowgrpo.operators.tasks import Problem
from flowgrpo.rewards import weighted_sum
from flowgrpo.trainer.monitoring.health import Alert


def median_baseline(rewards_NC, group_size, weights_C, eps):
    """Advantage = reward - the group's median reward (one outlier cannot move the baseline).

    rewards_NC float64 [N, C] (NaN = unscorable), groups are consecutive blocks of group_size.
    """
    x_GK = weighted_sum(rewards_NC, weights_C).view(-1, group_size)
    median_G = x_GK.nanmedian(dim=1).values  # the lower median of the scorable samples
    adv_GK = x_GK - median_G.unsqueeze(1)
    return torch.nan_to_num(adv_GK, nan=0.0).reshape(-1)  # unscorable samples get 0


def cispo_loss(logp_NT, old_logp_NT, adv_N, mask_NT, config, select_NT=None):
    """CISPO (MiniMax-M1, arXiv 2506.13585): loss_t = -sg(min(r_t, 1 + eps_high)) * A * logp_t.

    The clip bounds the importance weight but, unlike PPO's, never drops a token's gradient.
    """
    m = mask_NT.bool()
    logp = torch.where(m, logp_NT, 0.0)  # padding may hold -inf: keep it out of value and grad
    ratio = torch.where(m, (logp_NT - old_logp_NT).exp(), 1.0).detach()
    weight = ratio.clamp(max=1.0 + config.epsilon_high)
    loss_NT = torch.where(m, -weight * adv_N.unsqueeze(1) * logp, 0.0)
    return loss_NT, {"ratio_mean": float(ratio[m].mean()) if m.any() else 1.0}


def brevity(group, options, history=None):
    """1 / number of operators of a valid workflow, 0 otherwise: prefer short workflows."""
    return np.array([1.0 / len(s.report.operators) if s.valid else 0.0 for s in group])


def load_doubling(arg, n, seed, split):
    """'What is twice X?' math problems; ``arg`` (the text after 'task:') is the largest X."""
    rng = random.Random(f"doubling/{split}/{seed}")
    largest = int(arg or 50)
    xs = [rng.randint(1, largest) for _ in range(100 if n is None else n)]
    return [
        Problem(f"doubling/{split}/{i}", "math", f"What is twice {x}?", str(2 * x))
        for i, x in enumerate(xs)
    ]


ONE_WORKFLOW_STEPS = 2


def one_workflow(history, config):
    """Alert when every valid completion was the same workflow for ONE_WORKFLOW_STEPS steps."""
    recent = history[-ONE_WORKFLOW_STEPS:]
    if len(recent) < ONE_WORKFLOW_STEPS or any(
        not line.get("validity_rate") or line.get("distinct_workflows") != 1 for line in recent
    ):
        return None
    return Alert(
        "one_workflow",
        recent[-1]["step"],
        f"one distinct workflow for {ONE_WORKFLOW_STEPS} steps",
        {"distinct_workflows": 1},
        "raise rewards.weights.diversity or rollout.temperature",
    )


def shout(state, instruction, settings):
    """A refiner: one executor call restating the solution, whose reply is kept upper-cased."""
    reply = yield from call_llm(state, "Shout", f"Restate this answer: {state.solution}", settings)
    state.solution = reply.upper()


class ConstantBackend:
    """An executor backend that answers every request with one text, ``model`` (a stand-in for
    your own client of a server, a cache, a rule).

    The run builds it with ``max_new_tokens`` and, when set in the executor section,
    ``base_url`` and ``model``; ``settings_key`` names what changes its answers (the cache key).
    """

    def __init__(self, max_new_tokens=256, model="42"):
        self.reply = model
        self.settings_key = f"constant:{model}"

    def generate(self, requests):
        """One result per request, in order; a failure is a result with ``error`` set, never an
        exception (the workflow is then unscorable, not wrong)."""
        return [GenerationResult(self.reply, completion_tokens=1) for _ in requests]
