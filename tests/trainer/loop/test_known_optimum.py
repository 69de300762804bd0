"""Known-optimum runs (issue 13): the SIMULATED executor in the loop, sim/* metrics on every line,
and a training run that moves the policy toward the workflow the simulation says is best."""

import json
import math

import pytest
import torch
from trainer_fakes import FREE, text_rollout

from flowgrpo.operators.backends.simulated import SIM_KEYS
from flowgrpo.operators.simulation import SimulationParams, regret
from flowgrpo.operators.tasks import load_task
from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.loop import step as step_mod
from flowgrpo.trainer.loop.prompt import render_prompt
from flowgrpo.trainer.loop.trainer import Trainer

CONFIG = "configs/tiny-known-optimum.yaml"
ANSWER, CUSTOM = "AnswerGenerate", "Custom"


def lines_of(run_dir):
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_three_steps_of_the_tiny_known_optimum_config_log_sim_numbers(tmp_path, caplog):
    caplog.set_level("WARNING", logger="flowgrpo")
    cfg = load_config(CONFIG, (f"logging.output_dir={tmp_path}",))
    assert cfg.optim.max_steps == 3
    Trainer(cfg).train()  # the tiny random policy really generates; the executor is SIMULATED
    assert "SIMULATED executor (operators/simulation)" in caplog.text
    lines = lines_of(tmp_path)
    assert len(lines) == 3
    for line in lines:
        for key in SIM_KEYS:  # valid_regret is null when no completion is valid
            if key != "sim/valid_regret" or line[key] is not None:
                assert isinstance(line[key], float) and math.isfinite(line[key]), (key, line[key])
        assert line["sim/regret"] >= 0
        assert 0 <= line["sim/expected_accuracy"] <= line["sim/best_expected_accuracy"] <= 1


def test_runs_without_the_simulated_executor_write_no_sim_keys(tmp_path, monkeypatch):
    """The sim/* keys are the plugin's: a run where its hook is off has none (issue 41)."""
    monkeypatch.setattr(step_mod, "generate_rollout", text_rollout(lambda g: [CUSTOM] * 8))
    cfg = load_config(
        "configs/tiny.yaml", (f"logging.output_dir={tmp_path}", "optim.max_steps=1", FREE)
    )
    Trainer(cfg, executor=None).train()
    line = lines_of(tmp_path)[0]
    assert not [key for key in line if key in SIM_KEYS or key.startswith("sim/")]


# Extreme but legal parameters: one generator always right, the other always wrong, so the
# rewards are deterministic and the simulation's best of the two is unambiguous.
FAVOUR_ANSWER = ("answer_generate_correct=1.0", "custom_correct=0.0")
FAVOUR_CUSTOM = ("answer_generate_correct=0.0", "custom_correct=1.0")


def known_optimum_config(tmp_path, params, steps):
    return load_config(
        CONFIG,
        (
            f"logging.output_dir={tmp_path}",
            f"optim.max_steps={steps}",
            "health.guard=off",
            *(f"executor.options.params.{p}" for p in params),
        ),
    )


def sequence_logprob(model, tokenizer, problem, text, temperature):
    """log pi(text + EOS | the rollout prompt of ``problem``) at the sampling temperature."""
    prompt = tokenizer(render_prompt(problem, tokenizer), add_special_tokens=False)["input_ids"]
    completion = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1] / temperature
    logp = torch.log_softmax(logits.float(), dim=-1)
    return float(logp.gather(1, torch.tensor(completion)[:, None]).sum())


def preference(trainer, problems, best, worse):
    """Mean over ``problems`` of log pi(best) - log pi(worse)."""
    t = trainer.config.rollout.temperature
    model, tok = trainer.model, trainer.tokenizer
    model.eval()
    gaps = [
        sequence_logprob(model, tok, p, best, t) - sequence_logprob(model, tok, p, worse, t)
        for p in problems
    ]
    model.train()
    return sum(gaps) / len(gaps)


@pytest.mark.parametrize("params", [FAVOUR_ANSWER, FAVOUR_CUSTOM], ids=["answer", "custom"])
def test_training_moves_probability_toward_the_simulations_best_workflow(
    tmp_path, monkeypatch, params
):
    """Every group holds 4 x AnswerGenerate and 4 x Custom; which one the simulation makes
    better is flipped between the two cases. The policy's log-probability of the better one
    (relative to the other, on training prompts) must rise: a sign error, a reward that ignores
    the executor, or advantages attached to the wrong rows would move it the other way in one
    of the two cases."""
    sim = SimulationParams.from_dict({k: float(v) for k, v in (p.split("=") for p in params)})
    best, worse = sorted((ANSWER, CUSTOM), key=lambda w: regret(w, sim, "medium").regret)
    assert regret(best, sim, "medium").regret < regret(worse, sim, "medium").regret
    group = [ANSWER, CUSTOM] * 4
    monkeypatch.setattr(step_mod, "generate_rollout", text_rollout(lambda g: group))
    trainer = Trainer(known_optimum_config(tmp_path, params, steps=4))
    probe = load_task("arithmetic", n=3, seed=0, split="train")
    before = preference(trainer, probe, best, worse)
    trainer.train()
    after = preference(trainer, probe, best, worse)
    lines = lines_of(tmp_path)
    # the executor really ran (simulated): the better workflow was right, the worse wrong
    assert all(line["accuracy"] == 0.5 for line in lines)
    assert all(line["sim/expected_accuracy"] == pytest.approx(0.5) for line in lines)
    # every completion is valid, so the regret over valid ones is the regret
    assert all(line["sim/valid_regret"] == pytest.approx(line["sim/regret"]) for line in lines)
    assert all(not line["skipped_update"] for line in lines)
    assert after > before + 0.5, (before, after)  # measured: +1.1 nats in 4 steps, both cases
