"""Watching a run: per-step metrics, health checks and alerts, collapse detection, the guard.

Holds: ``metrics`` (the metrics of one step, the JSONL/TensorBoard writer, the console line),
``health`` (runs the health checks, the monitor that raises alerts; import checks, alerts and
``HealthConfig`` from here), ``alerts`` (``Alert`` and the ``HEALTH_CHECKS`` registry),
``health_config`` (``HealthConfig``), ``checks`` (the built-in checks), ``collapse`` (the
update -> collapse rule shared by the guard, the health check and ``flowgrpo diagnose``),
``guard`` (snapshot and rollback of the adapter and optimizer).

May import: ``flowgrpo.registry``, ``flowgrpo.configuration``, numpy, torch (guard only). Not
the loop, not the reports.
"""
