"""A plugin: importing it registers a reward component by name and a prompt-template operator.

List it in the config (``plugins: [my_ext.plugin]``, with ``examples/`` on PYTHONPATH) or by
file (``plugins: [examples/my_ext/plugin.py]``).
"""

from __future__ import annotations

import numpy as np

from flowgrpo.operators.custom import register_prompt_operator
from flowgrpo.rewards.components import register_component


@register_component("completion_length")
def completion_length(group, options, history=None):
    """1 for the group's shortest completion, less for longer ones (never NaN)."""
    lengths = np.array([max(len(s.completion), 1) for s in group], dtype=float)
    return lengths.min() / lengths


# A checker made from a prompt: its reply is the feedback, PASS / FAIL words decide the branch.
register_prompt_operator(
    "Critique",
    "checker",
    "{instruction}\n\nQuestion: {question}\nProposed answer: {solution}\n"
    "Reply PASS if the answer is right, else FAIL and what is wrong.",
    domains=("math", "qa"),
    description="a second opinion on the answer",
    default_instruction="Check the answer like a strict teacher.",
)
