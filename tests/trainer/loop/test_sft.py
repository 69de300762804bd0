"""Format SFT (``flowgrpo sft``, trainer/loop/sft.py): its targets, its loss, your pairs, and a
run whose adapter a known-optimum run starts from (``model.init_adapter``)."""

import json
import math
import random
from collections import Counter
from types import SimpleNamespace

import pytest
import torch
from click.testing import CliRunner

from flowgrpo.configuration import ConfigError
from flowgrpo.dsl import validate
from flowgrpo.dsl.fewshot import PromptSpec
from flowgrpo.dsl.generate import sft_tails, stratified_workflow
from flowgrpo.dsl.operators import default_table
from flowgrpo.operators.interpreter import Limits
from flowgrpo.operators.models import build_tiny_model
from flowgrpo.operators.simulation import analyze, best_workflow
from flowgrpo.operators.tasks import load_task
from flowgrpo.trainer.algorithms.completion_loss import completion_loss
from flowgrpo.trainer.cli.app import main
from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.loop import setup
from flowgrpo.trainer.loop.prompt import PolicyPrompt
from flowgrpo.trainer.loop.sft import jsonl_pairs, prepare_sft, train_sft

SMOKE = (
    "rollout.max_new_tokens=120",
    "sft.examples=12",
    "sft.batch_size=4",
    "sft.max_steps=3",
    "sft.eval_every=3",
    "sft.eval_from=0",
    "sft.eval_problems=2",
    "sft.eval_k=2",
)  # fmt: skip  (the tiny tokenizer is character-level: workflows need ~100 tokens)


def test_the_tails_of_the_aflow_table_on_math():
    assert sft_tails(default_table(), "math") == (
        "Review ? Revise : done", "(Review ? Revise : done) * 2", "(Review ? Revise : done) * 3",
        "Review ? Programmer : done", "Review ? AnswerGenerate : done", "Review ? Custom : done",
        "Revise", "Format",
    )  # fmt: skip


def test_targets_are_varied_valid_and_do_not_prefer_the_best_workflow():
    rng = random.Random(0)
    draws = [stratified_workflow(rng, default_table(), "math") for _ in range(2000)]
    assert all(validate(w, domain="math").ok for w in draws)
    assert not any("Format ->" in w for w in draws), "Format only ends a workflow"
    counts = Counter(draws)
    assert len(counts) > 300, "spread over many workflows"
    assert counts.most_common(1)[0][1] / len(draws) < 0.1, "no workflow dominates"
    limits, mix = Limits(max_llm_calls=12), {"easy": 1, "medium": 1, "hard": 1}
    for level in ("easy", "medium", "hard"):
        assert counts[best_workflow(None, level, limits=limits).workflow] / len(draws) < 0.01
    mean = sum(analyze(w, None, mix, limits).accuracy for w in draws[:200]) / 200
    assert best_workflow(None, mix, limits=limits).stats.accuracy - mean > 0.05, "room to learn"


def test_code_and_user_operators_are_drawn_for_their_domain():
    table = default_table().extend({"name": "Sketch", "role": "generator", "domains": ["qa"]})
    rng = random.Random(1)
    qa = [stratified_workflow(rng, table, "qa") for _ in range(300)]
    assert all(validate(w, domain="qa", operators=table).ok for w in qa)
    assert any("Sketch" in w for w in qa) and not any("Programmer" in w for w in qa)
    code = [stratified_workflow(rng, table, "code") for _ in range(100)]
    assert all(validate(w, domain="code").ok for w in code) and any("Test" in w for w in code)


def test_the_sft_check_counts_validity_as_the_runs_reward_does(monkeypatch):
    """Three Programmers (2 calls each with their retry), MdEnsemble's 3 votes and three
    Review/Revise rounds make 15 calls, over a budget of 12: valid with one call an operator
    (10), refused by the run's reward, and so by the check."""
    import flowgrpo.trainer.loop.sft as sft_module

    texts = [
        "[Programmer, Programmer, Programmer] -> MdEnsemble -> (Review ? Revise : done) * 3",
        "Custom -> Format",
    ]
    monkeypatch.setattr(sft_module, "generate_rollout",
                        lambda *a, **k: SimpleNamespace(texts=texts))  # fmt: skip
    assert validate(texts[0], domain="math").ok
    cfg = load_config("configs/tiny-known-optimum.yaml", (*SMOKE, "sft.eval_k=2"))
    problems = load_task(cfg.rollout.task, n=1, seed=0, split="validation")
    measured = sft_module.measure_validity(None, None, cfg, PolicyPrompt(), problems)
    assert measured["validity"] == 0.5 and measured["distinct_valid"] == 1


def test_the_loss_is_cross_entropy_on_the_completion_tokens_only():
    model, _ = build_tiny_model(seed=0)
    batch = [([5, 6, 7, 8], [9, 10, 2]), ([5, 6], [11, 2])]
    loss = completion_loss(model, batch, pad_id=0)
    logp, n = 0.0, 0
    with torch.no_grad():
        for prompt, completion in batch:
            logits = model(input_ids=torch.tensor([prompt + completion])).logits[0]
            for j, token in enumerate(completion):
                logp += float(torch.log_softmax(logits[len(prompt) + j - 1], -1)[token])
                n += 1
    assert float(loss) == pytest.approx(-logp / n, rel=1e-5)


def test_your_pairs_are_read_and_a_bad_line_is_named(tmp_path):
    good = tmp_path / "pairs.jsonl"
    good.write_text(json.dumps({"question": "2+2?", "workflow": "Custom->Format"}) + "\n\n"
                    + json.dumps({"question": "Capital?", "workflow": "AnswerGenerate",
                                  "domain": "qa"}) + "\n")  # fmt: skip
    problems, workflows = jsonl_pairs(str(good), PolicyPrompt())
    assert workflows == ["Custom -> Format", "AnswerGenerate"]
    assert [p.domain for p in problems] == ["math", "qa"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "q", "workflow": "Revise -> Custom"}) + "\n")
    with pytest.raises(ConfigError, match=r"line 1: workflow 'Revise -> Custom' is not valid"):
        jsonl_pairs(str(bad), PolicyPrompt())
    with pytest.raises(ConfigError, match="does not exist"):
        jsonl_pairs(str(tmp_path / "none.jsonl"), PolicyPrompt())
    with pytest.raises(ConfigError, match=f"{tmp_path} is a folder"):
        jsonl_pairs(str(tmp_path), PolicyPrompt())


def test_your_pairs_carry_the_labels_the_prompt_shows(tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    row = {"question": "2+2?", "workflow": "Custom", "meta": {"difficulty": "easy"}}
    pairs.write_text(json.dumps(row) + "\n")
    prompt = PolicyPrompt(PromptSpec(meta_keys=("difficulty",)))
    problems, _ = jsonl_pairs(str(pairs), prompt)
    assert prompt.messages(problems[0])[-1]["content"] == "Problem: 2+2?\ndifficulty: easy"
    pairs.write_text(json.dumps(row | {"meta": {"level": 3}}) + "\n")
    with pytest.raises(ConfigError, match=r"problem sft-1 has no meta key\(s\) \['difficulty'\]"):
        jsonl_pairs(str(pairs), prompt)
    pairs.write_text(json.dumps(row | {"meta": "easy"}) + "\n")
    with pytest.raises(ConfigError, match="line 1: 'meta' must be an object"):
        jsonl_pairs(str(pairs), prompt)


@pytest.mark.parametrize(("eval_from", "checked"), [(0, [0, 2, 3]), (2, [2, 3])])
def test_the_fresh_adapter_is_checked_only_when_eval_from_is_0(eval_from, checked):
    settings = (*SMOKE, "sft.eval_every=2", f"sft.eval_from={eval_from}", "sft.eval_problems=1",
                "sft.eval_k=1", "sft.target_validity=null")  # fmt: skip
    cfg = load_config("configs/tiny-known-optimum.yaml", settings)
    run = prepare_sft(cfg)
    result = train_sft(run.model, run.tokenizer, cfg, run.prompt, run.pairs, run.held_out)
    assert [line["step"] for line in result.history] == checked
    assert result.steps == 3 and result.final["samples"] == 1, "the last step's check"


def test_fewer_pairs_than_a_batch_make_batches_that_span_epochs():
    settings = (*SMOKE, "sft.max_steps=2", "sft.eval_every=2", "sft.eval_from=2",
                "sft.eval_problems=1", "sft.eval_k=1", "sft.target_validity=null")  # fmt: skip
    cfg = load_config("configs/tiny-known-optimum.yaml", settings)
    run = prepare_sft(cfg)
    pairs = run.pairs[:3]  # a batch of 4 from 3 pairs: once an IndexError
    result = train_sft(run.model, run.tokenizer, cfg, run.prompt, pairs, run.held_out)
    assert result.steps == 2 and result.examples == 3


def test_the_sft_check_samples_without_packed_weights(monkeypatch):
    """The check runs beside the optimizer state, where a packed copy of the weights lifted the
    known-optimum start's peak RSS over 2 GB (docs/BENCHMARKS.md): it never packs."""
    import flowgrpo.trainer.loop.sft as sft_module

    asked, real = [], sft_module.generate_rollout

    def recording(*args, **kwargs):
        asked.append(kwargs.get("packed", True))
        return real(*args, **kwargs)

    monkeypatch.setattr(sft_module, "generate_rollout", recording)
    settings = (*SMOKE, "sft.eval_every=1", "sft.eval_problems=1", "sft.eval_k=1",
                "sft.target_validity=null", "rollout.packed_weights=true")  # fmt: skip
    cfg = load_config("configs/tiny-known-optimum.yaml", settings)
    run = prepare_sft(cfg)
    train_sft(run.model, run.tokenizer, cfg, run.prompt, run.pairs, run.held_out)
    assert asked and not any(asked)


C1, C3 = 0.5 * (1 + math.cos(math.pi / 4)), 0.5 * (1 + math.cos(3 * math.pi / 4))


@pytest.mark.parametrize(
    ("scheduler", "warmup", "factors"),
    [
        ("constant", 0, [1, 1, 1, 1]),
        ("constant", 2, [0, 1 / 2, 1, 1]),
        ("cosine", 0, [1, C1, 1 / 2, C3]),
        ("cosine", 1, [0, 1, 3 / 4, 1 / 4]),
    ],
)  # after a warmup of 1: (1 + cos(pi * j / 3)) / 2 for j = 0, 1, 2
def test_each_step_runs_at_the_scheduled_learning_rate(scheduler, warmup, factors):
    settings = (*SMOKE, "sft.max_steps=4", "sft.eval_every=4", "sft.eval_from=4",
                "sft.eval_problems=1", "sft.eval_k=1", "sft.target_validity=null", "sft.lr=0.01",
                f"sft.scheduler={scheduler}", f"sft.warmup_steps={warmup}")  # fmt: skip
    cfg = load_config("configs/tiny-known-optimum.yaml", settings)
    run = prepare_sft(cfg)
    lines = []
    train_sft(run.model, run.tokenizer, cfg, run.prompt, run.pairs, run.held_out, lines.append)
    assert [line["lr"] for line in lines] == pytest.approx([0.01 * f for f in factors], abs=1e-12)


def test_bad_sft_settings_name_the_field():
    with pytest.raises(ConfigError, match=r"sft\.data"):
        load_config(None, ("sft.data=csv:x",))
    with pytest.raises(ConfigError, match=r"sft\.target_validity"):
        load_config(None, ("sft.target_validity=1.5",))
    with pytest.raises(ConfigError, match=r"sft\.scheduler.*constant, cosine"):
        load_config(None, ("sft.scheduler=linear",))
    with pytest.raises(ConfigError, match=r"sft\.warmup_steps"):
        load_config(None, ("sft.warmup_steps=-1",))


@pytest.mark.slow
def test_flowgrpo_sft_saves_an_adapter_a_known_optimum_run_starts_from(tmp_path):
    out, summary = tmp_path / "adapter", tmp_path / "summary.json"
    args = ["sft", "--config", "configs/tiny-known-optimum.yaml", "--out", str(out),
            "--json", str(summary)]  # fmt: skip
    for assignment in SMOKE:
        args += ["--set", assignment]
    done = CliRunner().invoke(main, args)
    assert done.exit_code == 0, done.output
    assert "format SFT of tiny-random: validity" in done.output
    result = json.loads(summary.read_text())
    assert 0 <= result["validity"] <= 1 and result["steps"] == 3 and result["examples"] > 0
    saved = load_config(out / "config.yaml")  # flowgrpo eval --adapter OUT reads it
    assert saved.model.name_or_path == "tiny-random" and saved.model.init_adapter is None
    cfg = load_config("configs/tiny-known-optimum.yaml", (f"model.init_adapter={out}",))
    model, _ = setup.policy(cfg)  # the shapes match the config it trained with
    b = [p for n, p in model.named_parameters() if "lora_B" in n]
    assert any(float(p.detach().abs().sum()) > 0 for p in b), "the SFT moved the adapter"
    again = CliRunner().invoke(main, args)  # the folder now holds an adapter: refused
    assert again.exit_code == 2 and "not empty" in again.output


@pytest.mark.parametrize(
    ("row", "says"),
    [
        ({"question": 5, "workflow": ["Custom"]}, "are strings, got int, list, str"),
        ({"question": "q", "workflow": "Custom", "domain": 3}, "are strings, got str, str, int"),
        ({"question": "q", "workflow": "Custom", "domain": "chemistry"}, "chemistry"),
    ],
)
def test_a_pair_whose_fields_are_not_text_is_a_config_error_naming_its_line(tmp_path, row, says):
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"question": "q", "workflow": "Custom"}) + "\n" + json.dumps(row))
    with pytest.raises(ConfigError, match="line 2") as caught:
        jsonl_pairs(str(path), PolicyPrompt())
    assert says in str(caught.value)
