"""Offline reports on runs and models: diagnose, analyze, evaluate, estimate, plots.

Holds: ``diagnose`` (health report of a run directory), ``analyze`` (DSL diversity of any
samples file), ``evaluate`` (a policy on held-out problems: validity, pass@k), ``eval_run``
(evaluations as ``flowgrpo eval`` runs them: a checkpoint as trained, or every checkpoint of a
run with the model loaded once), ``eval_all`` (that run's table, JSON and plot), ``estimate``
(memory estimate for ``--dry-run``), ``plots`` (the run plots of diagnose and the matplotlib
helpers analyze shares).

May import: ``flowgrpo.trainer.config``, ``.monitoring``, ``.loop`` (evaluate samples with the
rollout code), ``.algorithms``, and every package below the trainer. Only the CLI and the
Python front end ``flowgrpo.api`` import it.
"""
