"""Offline reports on runs and models: diagnose, analyze, evaluate, estimate, plots.

Holds: ``diagnose`` (health report of a run directory), ``analyze`` (DSL diversity of any
samples file), ``evaluate`` (a policy on held-out problems: validity, pass@k), ``estimate``
(memory estimate for ``--dry-run``), ``plots`` (the run plots of diagnose and the matplotlib
helpers analyze shares).

May import: ``flowgrpo.trainer.config``, ``.monitoring``, ``.loop`` (evaluate samples with the
rollout code), ``.algorithms``, and every package below the trainer. Only the CLI imports it.
"""
