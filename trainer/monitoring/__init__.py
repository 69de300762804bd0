"""Watching a run: per-step metrics, health checks and alerts, collapse detection, the guard.

Holds: ``metrics`` (the metrics of one step, the JSONL/TensorBoard writer, the console line),
``health`` (registered health checks and the monitor that raises alerts), ``collapse`` (the
update -> collapse rule shared by the guard, the health check and ``flowgrpo diagnose``),
``guard`` (snapshot and rollback of the adapter and optimizer).

May import: ``flowgrpo.registry``, numpy, torch (guard only). Not the loop, not the reports.
"""
