"""``flowgrpo eval --executor simulated``: the policy's workflows run on the SIMULATED executor,
and the analytic expected accuracy and regret are reported next to the empirical pass@1."""

import json

from click.testing import CliRunner

from flowgrpo.operators.backends.simulated import (
    RegretSettings,
    simulated_summary,
    simulation_metrics,
)
from flowgrpo.operators.interpreter import Limits
from flowgrpo.operators.models import build_tiny_model
from flowgrpo.operators.simulation import SimulationParams, best_workflow
from flowgrpo.operators.tasks import load_task
from flowgrpo.rewards import make_sample
from flowgrpo.trainer.cli.app import main
from flowgrpo.trainer.config import load_config, save_config
from flowgrpo.trainer.loop.policy import wrap_lora
from flowgrpo.trainer.reports.evaluate import format_eval

SIM = ("sim/regret", "sim/expected_accuracy", "sim/best_expected_accuracy", "sim/best_share")
ALL_SIM = (*SIM, "sim/valid_regret")


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_eval_with_the_simulated_executor_reports_analytic_numbers(tmp_path):
    out = tmp_path / "eval.json"
    result = invoke(
        "eval", "--base", "--model", "tiny-random", "--executor", "simulated", "--task",
        "arithmetic", "--n", "2", "--k", "2", "--max-new-tokens", "8", "--json", out,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["executor"].startswith("SIMULATED")
    assert data["settings"]["executor"].startswith("simulated:seed=0")
    assert all(isinstance(data[key], float) for key in SIM)
    assert data["sim/regret"] >= 0 and "pass@1" in data
    assert "executor: SIMULATED" in result.output
    assert "(analytic, simulated executor)" in result.output


def simulated_run(run_dir):
    """A checkpoint of a run that used the simulated executor with its own parameters."""
    cfg = load_config(
        "configs/tiny-known-optimum.yaml",
        (f"logging.output_dir={run_dir}", "executor.max_calls=3",
         "executor.options.params.programmer_correct=1.0",
         "executor.options.params.programmer_crash=0.0"),
    )  # fmt: skip
    peft = wrap_lora(build_tiny_model(seed=cfg.optim.seed)[0], cfg.lora)
    checkpoint = run_dir / "checkpoint-1"
    peft.save_pretrained(checkpoint / "adapter")
    (checkpoint / "trainer_state.pt").write_bytes(b"")
    save_config(cfg, run_dir / "config.yaml")
    return checkpoint


def test_a_simulated_runs_checkpoint_is_evaluated_with_its_simulation(tmp_path):
    checkpoint = simulated_run(tmp_path / "run")
    out = tmp_path / "eval.json"
    result = invoke(
        "eval", "--adapter", checkpoint, "--task", "arithmetic", "--n", "1",
        "--max-new-tokens", "8", "--json", out,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["executor"].startswith("SIMULATED")
    assert data["settings"]["executor_limits"]["max_llm_calls"] == 3
    # with programs always right the best workflow is certain: the run's parameters were used
    assert data["sim/best_expected_accuracy"] == 1.0


def test_simulated_summary_is_the_training_metric_over_the_samples_written():
    problems = load_task("arithmetic", n=2, seed=0, split="test")
    texts = ["Programmer -> Review ? Revise : done", "no workflow here", "Custom", "Programmer"]
    samples = [make_sample(p, t) for p, t in zip([problems[0]] * 2 + [problems[1]] * 2, texts)]
    settings = RegretSettings(SimulationParams(), Limits(max_llm_calls=12))
    out = simulated_summary(samples, problems, 2, settings)
    levels = [p.meta["difficulty"] for p in problems for _ in range(2)]
    workflows = [texts[0], None, texts[2], texts[3]]
    assert {k: out[k] for k in ALL_SIM} == simulation_metrics(workflows, levels, settings)
    best = best_workflow(None, levels[0], limits=settings.limits).stats.accuracy
    assert out["sim/best_expected_accuracy"] > 0 and best > 0
    result = {
        "task": "arithmetic", "problems": 2, "k": 2, "seconds": 1.0, "validity_rate": 0.75,
        "fallback_rate": 0.25, "pass@1": 0.5, "pass@2": 0.5, "distinct_workflows": 3,
        "executor_calls_per_problem": 2.0, "executor_tokens_per_problem": 9.0, "unscorable": 0,
        "top_workflows": [], "structures": {}, **out,
    }  # fmt: skip
    text = format_eval(result)
    assert "executor: SIMULATED" in text and "sim/regret" in text
