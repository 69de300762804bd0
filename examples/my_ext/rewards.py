"""A reward component named by dotted path: ``rewards.weights: {"my_ext.rewards:brevity": 0.1}``.

A component scores every sample of one group (the K completions of one problem) and returns
one float per sample, in [0, 1], NaN where a sample cannot be scored. No registration needed:
the dotted path imports it on first use.
"""

from __future__ import annotations

import numpy as np


def brevity(group, options, history=None):
    """1 / the number of operator calls of a valid workflow (1 for one call), 0 for the rest."""
    return np.array([1.0 / max(s.report.calls, 1) if s.valid else 0.0 for s in group])
