"""The constrained sampler keeps the run's call budget (``executor.max_calls``), not the dsl
default: in training and in evaluation every constrained sample validates under the limits its
executor enforces (an over-budget workflow would be refused by the executor, reward 0)."""

import json

from flowgrpo.dsl.validate import Limits as DslLimits
from flowgrpo.dsl.validate import validate
from flowgrpo.operators.backends.scripted import ScriptedBackend
from flowgrpo.operators.interpreter import Limits
from flowgrpo.operators.models import build_tiny_model
from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.loop import rollout as rollout_mod
from flowgrpo.trainer.loop.constrain import sampling_limits
from flowgrpo.trainer.loop.trainer import Trainer
from flowgrpo.trainer.reports.evaluate import EvalSettings, evaluate

BUDGET = 2  # far below the dsl default (20): a random policy writes longer workflows


def test_training_samples_keep_the_executors_call_budget(tmp_path):
    cfg = load_config(
        "configs/tiny.yaml",
        (f"logging.output_dir={tmp_path}", "rollout.constrained=grammar",
         f"executor.max_calls={BUDGET}", "optim.max_steps=1",
         "rollout.dynamic_sampling=false"),
    )  # fmt: skip
    Trainer(cfg, executor=ScriptedBackend(lambda request: "5")).train()
    rows = [json.loads(x) for x in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 16
    for row in rows:  # checked here by validate's own call count under the run's budget
        report = validate(row["completion"], domain="math")
        assert report.ok, row["completion"]
        assert report.calls <= BUDGET, row["completion"]


def test_evaluation_samples_keep_the_executors_call_budget(monkeypatch):
    texts, real = [], rollout_mod.generate_rollout

    def spy(*args, **kwargs):
        rollout = real(*args, **kwargs)
        texts.extend(rollout.texts)
        return rollout

    monkeypatch.setattr(rollout_mod, "generate_rollout", spy)
    model, tok = build_tiny_model(seed=1)
    settings = EvalSettings(n=4, k=16, temperature=1.0, max_new_tokens=48, execute=False,
                            constrained="grammar")  # fmt: skip
    limits = Limits(max_llm_calls=BUDGET)  # the interpreter's limits, as `flowgrpo eval` has
    result = evaluate(model, tok, settings, executor=None, limits=limits)
    assert result["validity_rate"] == 1.0 and len(texts) == 64
    for text in texts:
        report = validate(text, domain="math")
        assert report.ok and report.calls <= BUDGET, text


def test_sampling_limits_lower_only_the_call_budget():
    assert sampling_limits(None) is None
    assert sampling_limits(Limits(max_llm_calls=12)) == DslLimits(max_calls=12)
    assert sampling_limits(Limits(max_llm_calls=99)) == DslLimits()  # never above the DSL's
