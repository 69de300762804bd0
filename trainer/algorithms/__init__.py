"""The RL algorithms, as pure functions registered by name.

Holds: ``advantages`` (advantage estimators: grpo, dr_grpo, rloo, global, gdpo), ``losses``
(policy losses, aggregations and the one training objective), ``logprobs`` (per-token log-probs
and entropies of sampled completions at the sampling temperature).

May import: torch, ``flowgrpo.registry``, ``flowgrpo.configuration``, ``flowgrpo.rewards`` (the
weighted sum) and ``.config`` (``LossConfig``, ``EntropyControl``: their settings, as data).
Nothing else of the trainer: the loop calls these, never the other way round.
"""
