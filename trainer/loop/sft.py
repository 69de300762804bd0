"""Format SFT (``flowgrpo sft``, the ``sft`` config section): teach a fresh LoRA adapter the
workflow DSL by plain cross-entropy on (policy prompt -> workflow) pairs, stopping at a target
validity measured by sampling held-out problems at the rollout temperature, as the reward
validates them. The adapter is what ``model.init_adapter`` starts RL from.

Pairs come from the run's operator table (``sft.data: grammar``: one stratified draw per
training problem, :func:`flowgrpo.dsl.generate.stratified_workflow`) or from the user's JSONL of
``{"question", "workflow"[, "domain", "meta"]}`` objects (``meta``: the labels the prompt's
``meta_keys`` show). The loss is the mean cross-entropy over the completion tokens (workflow +
end token), prompt tokens masked, as TRL's SFTTrainer with ``completion_only_loss``
(:mod:`..algorithms.completion_loss`: the batch's shared prompt prefix runs once and only
completion positions reach the vocabulary).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from flowgrpo.configuration import ConfigError
from flowgrpo.dsl import DEFAULT_STATIC_LIMITS, StaticLimits, validate
from flowgrpo.dsl.generate import stratified_workflow
from flowgrpo.dsl.operators import default_table
from flowgrpo.files import read_text
from flowgrpo.operators.executor import executor_limits
from flowgrpo.operators.tasks import Problem, load_task
from flowgrpo.rewards import prepare_samples
from flowgrpo.trainer.algorithms.completion_loss import completion_backward
from flowgrpo.trainer.config import save_config
from flowgrpo.trainer.loop import setup
from flowgrpo.trainer.loop.checkpoint import follow_umask
from flowgrpo.trainer.loop.environment import build_environment
from flowgrpo.trainer.loop.memory import release_memory
from flowgrpo.trainer.loop.prompt import PolicyPrompt
from flowgrpo.trainer.loop.rollout import generate_rollout

logger = logging.getLogger(__name__)

Pair = tuple[list[int], list[int]]  # (prompt ids, completion ids ending in the end token)
# held-out problems per generate call: 4 x eval_k rows, a training rollout's shape (16 problems
# x 4 rows peaked 1.2 GB above 4 x 4 on SmolLM2-135M; docs/BENCHMARKS.md)
CHECK_BATCH = 4


@dataclass
class SFTResult:
    """What a format SFT did: steps, pairs, the last held-out check and every check."""

    steps: int
    examples: int
    final: dict
    history: list[dict] = field(default_factory=list)


def grammar_pairs(cfg, prompt: PolicyPrompt) -> tuple[list[Problem], list[str]]:
    """``sft.examples`` training problems, each with one stratified workflow of its domain.
    Drawn with one call an operator: 1.8-3.3% of them (qa to math) a 12-call run's reward
    refuses, MdEnsemble's votes and Programmer's retry counted; drawing within the run's count
    was measured and not adopted (research/RECORD.md, "The format start within the run's call
    count")."""
    s, table = cfg.sft, prompt.operators or default_table()
    problems = load_task(cfg.rollout.task, n=s.examples, seed=cfg.rollout.seed, split="train")
    rng = random.Random(s.seed)
    return problems, [stratified_workflow(rng, table, p.domain) for p in problems]


def jsonl_pairs(
    path: str, prompt: PolicyPrompt, limits: StaticLimits = DEFAULT_STATIC_LIMITS
) -> tuple[list[Problem], list[str]]:
    """The user's pairs; a bad line is a ``ConfigError`` naming it and what to fix. ``limits``:
    the run's static limits (a workflow its reward would refuse is no target)."""
    file = Path(path)
    if not file.is_file():
        what = "is a folder" if file.is_dir() else "does not exist"
        raise ConfigError(f"sft.data: {path} {what}; give jsonl:PATH of a JSONL file")
    problems, workflows = [], []
    for n, line in enumerate(read_text(file).splitlines(), 1):
        if not line.strip():
            continue
        where = f"sft.data: {path}: line {n}"
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise ConfigError(f"{where} is not valid JSON ({exc})") from None
        if not isinstance(row, dict) or not {"question", "workflow"} <= set(row):
            raise ConfigError(f"{where}: write one object with 'question' and 'workflow'")
        domain = row.get("domain", "math")
        texts = (row["question"], row["workflow"], domain)
        if not all(isinstance(t, str) for t in texts):
            raise ConfigError(f"{where}: 'question', 'workflow' and 'domain' are strings, got "
                              f"{', '.join(type(t).__name__ for t in texts)}")  # fmt: skip
        try:
            report = validate(row["workflow"], domain=domain, operators=prompt.operators,
                              limits=limits)  # fmt: skip
        except ValueError as exc:  # a domain the operator table does not know
            raise ConfigError(f"{where}: {exc}") from None
        if not report.ok:
            raise ConfigError(f"{where}: workflow {row['workflow']!r} is not valid for "
                              f"{domain}: {report.errors[0].message}")  # fmt: skip
        meta = row.get("meta", {})
        if not isinstance(meta, dict):
            raise ConfigError(f"{where}: 'meta' must be an object of labels, got {meta!r}")
        problem = Problem(f"sft-{n}", domain, str(row["question"]), "", meta=meta)
        prompt.spec.meta_lines(problem.id, meta)  # the labels the prompt shows must be there
        problems.append(problem)
        workflows.append(report.canonical)
    if not problems:
        raise ConfigError(f"sft.data: {path} holds no pairs")
    return problems, workflows


def build_pairs(tokenizer, prompt, problems, workflows, max_new_tokens: int) -> list[Pair]:
    """Token pairs; completions longer than the rollout's budget are dropped (the policy could
    never finish them)."""
    eos, pairs = tokenizer.eos_token_id, []
    for problem, workflow in zip(problems, workflows, strict=True):
        ids = tokenizer(prompt.render(problem, tokenizer), add_special_tokens=False)["input_ids"]
        completion = tokenizer(workflow, add_special_tokens=False)["input_ids"] + [eos]
        if len(completion) <= max_new_tokens:
            pairs.append((ids, completion))
    return pairs


def measure_validity(model, tokenizer, cfg, prompt: PolicyPrompt, problems) -> dict:
    """Validity and fallback rates of ``sft.eval_k`` samples per held-out problem at the
    rollout temperature, validated exactly as the run's reward does (its call budget)."""
    r, k, samples = cfg.rollout, cfg.sft.eval_k, []
    limits = executor_limits(cfg.executor)
    for i in range(0, len(problems), CHECK_BATCH):
        chunk = problems[i : i + CHECK_BATCH]
        # not packed: beside the optimizer state the packed copy of the weights lifted the
        # known-optimum start's peak RSS from 1.83 to 2.25 GB (docs/BENCHMARKS.md)
        rollout = generate_rollout(model, tokenizer, chunk, k, r.temperature, 1.0,
                                   r.max_new_tokens, prompt=prompt, packed=False)  # fmt: skip
        samples += prepare_samples(chunk, rollout.texts, k, limits=limits, execute=False,
                                   operators=prompt.operators)  # fmt: skip
    valid = [s.canonical for s in samples if s.valid]
    return {
        "validity": len(valid) / len(samples),
        "fallback": sum(s.fallback for s in samples) / len(samples),
        "distinct_valid": len(set(valid)),
        "samples": len(samples),
        "top_valid": Counter(valid).most_common(3),
    }


def train_sft(
    model, tokenizer, cfg, prompt: PolicyPrompt, pairs: list[Pair], held_out,
    on_step: Callable[[dict], None] | None = None,
) -> SFTResult:  # fmt: skip
    """AdamW steps over shuffled epochs of ``pairs`` until held-out validity reaches
    ``sft.target_validity`` or ``sft.max_steps``; ``on_step`` gets each step's line."""
    s = cfg.sft
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=s.lr)
    schedule = setup.lr_schedule(optimizer, s.scheduler, s.warmup_steps, s.max_steps)
    rng, order = random.Random(s.seed), []
    shared = cfg.logprob_mode == "shared_prompt"  # the run's scoring mode (full: checkpointing)
    history, step, measured = [], 0, None
    notify = on_step or (lambda line: None)
    if s.eval_from == 0:  # the fresh adapter's validity: a baseline only when asked for
        measured = _timed_check(model, tokenizer, cfg, prompt, held_out)
        history.append({"step": 0, **measured})
        notify(history[0])
    while step < s.max_steps and not _reached(measured, s.target_validity):
        step += 1
        while len(order) < s.batch_size:  # fewer pairs than a batch: it spans epochs
            order += rng.sample(range(len(pairs)), len(pairs))
        model.train()
        started = time.perf_counter()
        batch = [pairs[order.pop()] for _ in range(s.batch_size)]
        optimizer.zero_grad()
        loss = completion_backward(model, batch, tokenizer.pad_token_id, s.micro_batch_size,
                                   share_prefix=shared, bf16=s.bf16)  # fmt: skip
        lr = optimizer.param_groups[0]["lr"]  # the rate this step ran with
        optimizer.step()
        schedule.step()
        line = {"step": step, "loss": loss, "lr": lr, "seconds": time.perf_counter() - started}
        if (step >= s.eval_from and step % s.eval_every == 0) or step == s.max_steps:
            measured = _timed_check(model, tokenizer, cfg, prompt, held_out)
            line.update(measured)
            history.append(line)
        notify(line)
    return SFTResult(step, len(pairs), measured, history)


def _timed_check(model, tokenizer, cfg, prompt, held_out) -> dict:
    # the steps' freed activations go back to the system before sampling grows its KV cache,
    # and the check's cache before the next steps: the phases' memory does not add up
    started = time.perf_counter()
    release_memory()
    measured = measure_validity(model, tokenizer, cfg, prompt, held_out)
    release_memory()
    return {**measured, "check_seconds": time.perf_counter() - started}


def _reached(measured: dict | None, target: float | None) -> bool:
    return target is not None and measured is not None and measured["validity"] >= target


@dataclass
class SFTSetup:
    """What a format SFT trains on: a fresh LoRA adapter of the run's shape (``model``,
    ``tokenizer``), the run's ``prompt``, the token ``pairs``, the ``held_out`` problems of the
    checks and how many distinct workflows the pairs teach (``targets``)."""

    model: object
    tokenizer: object
    prompt: PolicyPrompt
    pairs: list[Pair]
    held_out: list[Problem]
    targets: int


def prepare_sft(cfg) -> SFTSetup:
    """The :class:`SFTSetup` of ``cfg`` (its model, lora, task, prompt and ``sft`` section);
    the problems and pairs are checked before the model loads."""
    prompt = build_environment(cfg, with_executor=False, with_problems=False).prompt
    data = cfg.sft.data
    if data == "grammar":
        problems, workflows = grammar_pairs(cfg, prompt)
    else:
        limits = executor_limits(cfg.executor).static_limits()
        problems, workflows = jsonl_pairs(data[6:], prompt, limits)
    held_out = load_task(cfg.rollout.task, n=cfg.sft.eval_problems, seed=cfg.rollout.seed,
                         split="validation")  # fmt: skip
    torch.manual_seed(cfg.sft.seed)
    model, tokenizer = setup.policy(cfg)  # a fresh LoRA adapter of the run's shape
    setup.warn_emulated_bf16({"sft.bf16": cfg.sft.bf16}, next(model.parameters()).device)
    pairs = build_pairs(tokenizer, prompt, problems, workflows, cfg.rollout.max_new_tokens)
    if not pairs:
        raise ConfigError(f"sft.data: no workflow fits rollout.max_new_tokens="
                          f"{cfg.rollout.max_new_tokens}; raise it")  # fmt: skip
    return SFTSetup(model, tokenizer, prompt, pairs, held_out, len(set(workflows)))


def run_sft(cfg, out: str | Path, on_step: Callable[[dict], None] | None = None) -> dict:
    """Format SFT of ``cfg`` (:func:`prepare_sft`) from a fresh adapter; saves the adapter and
    the config (``model.init_adapter`` null) in ``out`` and returns the summary."""
    # the adapter starts fresh: init_adapter is what this run produces
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, init_adapter=None))
    run = prepare_sft(cfg)
    result = train_sft(run.model, run.tokenizer, cfg, run.prompt, run.pairs, run.held_out, on_step)
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    run.model.save_pretrained(str(path))
    follow_umask(path)  # safetensors writes 0600
    save_config(cfg, path / "config.yaml")  # `flowgrpo eval --adapter OUT` reads it
    return {
        "model": cfg.model.name_or_path, "adapter": str(path), "examples": result.examples,
        "distinct_targets": run.targets, "steps": result.steps,
        "validity": result.final["validity"], "fallback": result.final["fallback"],
        "distinct_valid": result.final["distinct_valid"], "eval_samples": result.final["samples"],
        "temperature": cfg.rollout.temperature, "top_valid": result.final["top_valid"],
        "history": result.history,
    }  # fmt: skip
