"""docs/METRICS.md documents exactly the keys the trainer writes."""

from pathlib import Path

from flowgrpo.metrics_hooks import MetricsHook
from flowgrpo.trainer.loop.update import UPDATE_KEYS
from flowgrpo.trainer.monitoring.metrics import METRICS_KEYS, complete_metrics, metrics_table

REPO = Path(__file__).parents[3]

DOC = Path(__file__).parents[3] / "docs" / "METRICS_TABLE.md"


def test_the_metrics_doc_is_generated_from_the_schema_and_the_plugins_hooks(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    from metrics_table import HEADER, documented_table

    text = DOC.read_text(encoding="utf-8")
    table = text.removeprefix(HEADER)
    assert text.startswith(HEADER) and table == documented_table(), (
        "docs/METRICS_TABLE.md is stale: python scripts/metrics_table.py"
    )
    assert "METRICS_TABLE.md" in (REPO / "docs" / "METRICS.md").read_text()  # the doc links it
    assert "`sim/regret` | plugin hook `sim`" in table  # the simulation's keys, from its plugin


def test_a_hooks_keys_are_listed_with_their_meanings():
    keys, meanings = ("mine/a", "mine/b"), {"mine/a": "A"}
    hook = MetricsHook(keys=keys, start=None, compute=None, meanings=meanings)
    table = metrics_table([("mine", hook)])
    assert table.endswith(
        "| `mine/a` | plugin hook `mine`, only in runs where it is on: A |\n"
        "| `mine/b` | plugin hook `mine`, only in runs where it is on:  |\n"
    )


def test_every_update_key_is_documented():
    assert set(UPDATE_KEYS) <= set(METRICS_KEYS)


def test_complete_metrics_fills_missing_keys_with_none_and_keeps_extras():
    line = complete_metrics({"step": 3, "rewards/validity/mean": 0.5})
    assert list(line)[: len(METRICS_KEYS)] == list(METRICS_KEYS)
    assert line["step"] == 3 and line["loss"] is None
    assert line["rewards/validity/mean"] == 0.5
