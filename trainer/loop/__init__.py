"""The training loop and one training step.

Holds: ``trainer`` (the ``Trainer``: builds the pieces, runs steps, saves checkpoints),
``step`` (one step as typed pure functions: rollout -> scores -> advantages -> update ->
health), ``rollout`` (sampling K completions per problem), ``update`` (the optimizer step over
per-group micro-batches), ``policy`` (loading the LoRA policy, merged/disabled adapter),
``prompt`` (the policy's prompt), ``environment`` (the run environment, built once: plugins,
registry names, the run's operator table and prompt, problems, executor), ``setup`` (building
the pieces from the config), ``checkpoint`` (atomic save/load), ``rundir`` (what a run folder
holds: its files and checkpoint folders, the checks before a run writes, which checkpoint a
resume takes), ``init_adapter`` (starting from a saved LoRA adapter,
``model.init_adapter``), ``metric_hooks`` (plugins' metrics hooks on for a run, e.g. ``sim/*``,
and their numbers each step).

May import: ``flowgrpo.trainer.config``, ``.algorithms``, ``.monitoring`` and every package
below the trainer. Not ``.reports`` or ``.cli``.
"""
