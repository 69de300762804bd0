"""Does the RL learn to pick better workflows? Seeds of the known-optimum run, held-out eval.

Trains ``configs/known-optimum.yaml`` (SmolLM2-135M + LoRA from the format-trained adapter,
scored by the SIMULATED executor: accuracies come from a model of operators, not from an LLM)
once per seed, then evaluates the start policy and each run's final checkpoint on held-out
problems (the test split) with the same simulated executor, as
``flowgrpo eval --adapter RUN/checkpoint-N --executor simulated --n N --k K`` does. Writes
``OUT/known_optimum.md`` (per-seed table, means with 95% intervals, a figure of regret over
training; a file of its own, which the docs link) and ``OUT/known_optimum.json`` (OUT:
research/records/ by default):

    python research/learn_known_optimum.py --seeds 0 1 2 3 4          # CPU, about 40 minutes
    python research/learn_known_optimum.py --from-runs ...            # runs already trained
    python research/learn_known_optimum.py --tag T --resume ...       # skip seeds already saved
    python research/learn_known_optimum.py --smoke --out /tmp/smoke   # tiny model (CI)

With ``--label-start KEY`` (repeatable) each world's start is first made from a per-label
``flowgrpo search --by KEY`` and ``flowgrpo sft`` on each label's best workflow (issue 40;
studylib/label_start.py), e.g. every adaptive world, 5 seeds, one command:

    python research/learn_known_optimum.py --world configs/worlds/adaptive-*.yaml \
        --label-start template --label-start difficulty --tag label-start

Regret is the best achievable expected reward minus the expected reward of the workflows
written (``sim/regret``; docs/SIMULATED_EXECUTOR.md); it falls when the policy learns.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

from studylib.args import refuse_below_one
from studylib.choice import (  # issue 40
    choice_report,
    pick_reward,
    table_reward,
)
from studylib.group_signal import is_near  # issue 20
from studylib.known_optimum_report import SERIES_KEYS, figure_of, write
from studylib.known_optimum_store import json_path, resumed, save, write_choice
from studylib.label_start import LabelStart, build_label_start, search_files, start_folder
from studylib.study import alert_steps, series

EVAL_KEYS = (
    "validity_rate", "pass@1", "sim/expected_accuracy", "sim/regret", "sim/valid_regret",
    "sim/best_share",
)  # fmt: skip
# part of the cached start's key: raised when the sampler changes what a start writes
# (2: the constrained sampler keeps the executor's call budget, not the DSL default)
SAMPLER_VERSION = 2
# --label-start in a smoke run searches a few short workflows (the tiny model writes 40 tokens)
SMOKE_CANDIDATES = (
    "Programmer", "AnswerGenerate", "Custom", "Programmer -> Review ? Revise : done")  # fmt: skip
# rollout fields that shape training batches only: the start's held-out eval never reads them
TRAINING_ONLY = ("problems_per_step", "num_generations", "allow_small_groups", "logprob_mode",
                 "executions", "cache_path", "cache_max_entries", "dynamic_sampling",
                 "max_resample_rounds", "spare_problems", "tie_temperature",
                 "tie_temperature_step", "max_tie_temperature", "resample")  # fmt: skip


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="configs/known-optimum.yaml")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--steps", type=int, help="default: the config's optim.max_steps")
    p.add_argument("--eval-n", type=int, default=40, help="held-out problems")
    p.add_argument("--eval-k", type=int, default=4, help="workflows sampled per problem")
    p.add_argument("--runs-dir", default="runs/known_optimum", help="raw runs (not committed)")
    p.add_argument("--out", default="research/records")
    p.add_argument("--from-runs", action="store_true", help="evaluate runs already trained")
    p.add_argument("--smoke", action="store_true", help="tiny random model (for CI)")
    p.add_argument("--world", dest="worlds", action="extend", nargs="+", default=[],
                   metavar="FILE",
                   help="world files (configs/worlds/*.yaml), one or more, or repeat the option "
                        "(default: the config's own simulation)")  # fmt: skip
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   help="a config override for every run, e.g. optim.lr=1e-4")  # fmt: skip
    p.add_argument("--set-rl", dest="rl_overrides", action="append", default=[],
                   help="a config override of the RL runs only, not of the --label-start "
                        "(which is then shared with the runs without it)")  # fmt: skip
    p.add_argument("--jobs", type=int, default=1,
                   help="seeds trained at once, each in its own process with CPUs/JOBS torch "
                        "threads (default 1: in this process; on a 2-core CPU 2 jobs took 0.91x "
                        "the wall time of 1: docs/BENCHMARKS.md)")  # fmt: skip
    p.add_argument("--threads", type=int, help="torch threads per seed (default: CPUs / "
                   "--jobs); 1 costs the fewest CPU minutes (docs/BENCHMARKS.md)")  # fmt: skip
    p.add_argument("--tag", default="", help="names this setting in run folders and tables")
    p.add_argument("--no-write", action="store_true", help="JSON only; no known_optimum.md")
    p.add_argument("--resume", action="store_true",
                   help="keep every world and seed already in OUT's JSON for this tag and "
                        "run only the --seeds not saved (a study goes on)")  # fmt: skip
    p.add_argument("--label-start", dest="label_keys", action="append", default=[],
                   metavar="KEY",
                   help="start each world from a per-label search: `flowgrpo search --by KEY` "
                        "(repeat for several keys), each label's best workflow as SFT pairs, "
                        "`flowgrpo sft`, the labels shown (prompt.meta_keys); built once per "
                        "world under RUNS_DIR/label-start (studylib/label_start.py)")  # fmt: skip
    p.add_argument("--label-budget", type=int, default=4_500_000,
                   help="executor calls of the whole per-label search (default 4,500,000: "
                        "300,000 per label for 15 labels)")  # fmt: skip
    p.add_argument("--label-sft-steps", type=int, default=120, help="SFT steps of that start")
    args = p.parse_args(argv)
    refuse_below_one(p, args, ("jobs", "threads", "steps", "eval_n", "eval_k"))
    if len(set(args.seeds)) != len(args.seeds):  # a seed twice would count twice in the table
        p.error(f"--seeds names a seed twice: {args.seeds}")
    if args.smoke:
        args.config, args.steps, args.eval_n = "configs/tiny-known-optimum.yaml", 2, 4
        args.seeds = args.seeds[:2]
        args.label_budget, args.label_sft_steps = min(args.label_budget, 2000), 2
    return args


def label_recipe(args) -> LabelStart | None:
    """``--label-start``'s recipe (None without it)."""
    if not args.label_keys:
        return None
    smoke = SMOKE_CANDIDATES if args.smoke else None
    return LabelStart(tuple(args.label_keys), args.label_budget, args.label_sft_steps, smoke)


def label_sets(args, world) -> list[str]:
    """The ``--set`` overrides the label start is built with: the world's and the study's."""
    return [*world_overrides(world), *args.overrides]


def label_folder(args, world) -> Path:
    """Where ``world``'s label start is built (shared by every tag: its name hashes the recipe)."""
    root = Path(args.runs_dir) / "label-start"
    return start_folder(root, label_recipe(args), args.config, label_sets(args, world))


def world_overrides(world) -> list[str]:
    """The ``--set`` overrides that put a run in ``world`` (None: the config's own)."""
    if world is None:
        return []
    out = [f"executor.options.params:={json.dumps(dict(world.simulation))}"]
    out += [f"rewards.weights.{k}={v}" for k, v in world.reward_weights.items()]
    out += [f"rewards.options.{k}={json.dumps(v)}" for k, v in world.reward_options.items()]
    return out


def run_root(args, world) -> Path:
    """Where a world's runs go: RUNS_DIR[/TAG][/WORLD]."""
    root = Path(args.runs_dir) / args.tag if args.tag else Path(args.runs_dir)
    return root / world.name if world is not None else root


def config_of(args, seed: int | None, world=None):
    from flowgrpo.trainer.config import load_config

    overrides = ["rollout.cache_path=null", "logging.save_every=0", *world_overrides(world)]
    overrides += [*args.overrides, *args.rl_overrides]
    if args.label_keys:
        folder = label_folder(args, world) / "start"
        overrides += [*label_recipe(args).overrides(), f"model.init_adapter={folder}"]
    if args.steps is not None:
        overrides.append(f"optim.max_steps={args.steps}")
    if seed is not None:
        run_dir = run_root(args, world) / f"seed{seed}"
        overrides += [f"optim.seed={seed}", f"rollout.seed={seed}", f"logging.output_dir={run_dir}"]
    return load_config(args.config, tuple(overrides))


def held_out(cfg, model, tokenizer, args) -> dict:
    """The policy on ``--eval-n`` test problems, ``--eval-k`` samples each, evaluated as
    ``flowgrpo eval`` evaluates a checkpoint of the run (its sampling, prompt, executor, hooks)."""
    from flowgrpo.operators.simulation.metrics import regret_settings
    from flowgrpo.operators.tasks import load_task
    from flowgrpo.trainer.reports.eval_run import EvalOptions, EvalSession

    # device auto: the GPU where one is visible, as training uses it
    session = EvalSession(cfg, EvalOptions(n=args.eval_n, k=args.eval_k, device="auto"))
    session.use_model(model, tokenizer)
    result = session.evaluate()
    out = {key: result.get(key) for key in EVAL_KEYS}
    sim = regret_settings(cfg, session.limits)
    out.update(mode_of(result.get("top_workflows") or [], sim, result.get("samples") or 1))
    # issue 40: against the best single workflow and the oracle, on these same problems
    problems = load_task(session.settings.task, n=session.settings.n, seed=session.settings.seed,
                         split="test")  # fmt: skip
    out["choice"] = choice_report(sim, problems, result["sample_workflows"], session.settings.k)
    return out


def mode_of(top: list, sim, samples: int) -> dict:
    """The most-written held-out workflow, its share and its regret on the difficulty mix."""
    from flowgrpo.operators.simulation import best_workflow, regret
    from flowgrpo.operators.simulation.oracle import arithmetic_mix

    mix = arithmetic_mix(sim.params)  # without templates: the three difficulties, equally
    best = best_workflow(sim.params, mix, limits=sim.limits, tradeoff=sim.tradeoff)
    if not top:
        return {"mode": None, "mode_share": 0.0, "mode_regret": best.reward,
                "near_best": False, "best": best.workflow, "best_reward": best.reward}  # fmt: skip
    text, count = top[0]
    r = regret(text, sim.params, mix, limits=sim.limits, tradeoff=sim.tradeoff)
    return {
        "mode": text, "mode_share": count / samples, "mode_regret": r.regret,
        "near_best": is_near(r.regret), "best": best.workflow, "best_reward": best.reward,
    }  # fmt: skip


def base_model(cfg):
    """(model, tokenizer) without an adapter, loaded once and copied for each policy."""
    from flowgrpo.operators.models import load_model

    m = cfg.model
    model, tokenizer = load_model(
        m.name_or_path, gguf_file=m.gguf_file, dtype=m.dtype, seed=cfg.optim.seed
    )
    return model, tokenizer  # load_model gives it a pad token


def train_and_eval(args, seed: int, base, world=None) -> dict:
    """Train one seed (unless ``--from-runs``) and evaluate its final checkpoint."""
    import torch
    from peft import PeftModel

    from flowgrpo.trainer.loop.interrupt import EXIT_CODES
    from flowgrpo.trainer.loop.rundir import latest_checkpoint
    from flowgrpo.trainer.loop.trainer import Trainer
    from flowgrpo.trainer.reports.diagnose import read_jsonl
    from flowgrpo.trainer.reports.evaluate import checkpoint_adapter

    if args.threads is not None:  # --jobs > 1: run_pool set it already
        torch.set_num_threads(args.threads)
    cfg = config_of(args, seed, world)
    run_dir = Path(cfg.logging.output_dir)
    wall, cpu = time.perf_counter(), time.process_time()
    if not args.from_runs:
        model = copy.deepcopy(base[0])
        result = Trainer(cfg, model=model, tokenizer=base[1], overwrite=True).train()
        if result.exit_code in EXIT_CODES.values():  # Ctrl-C / kill: stop the study
            where = world.name if world is not None else "config"
            sys.exit(
                f"[{where}] seed {seed} interrupted at step {result.steps} of "
                f"{cfg.optim.max_steps}: not recorded. Seeds that finished are saved; run the "
                "same command with --resume to continue (this seed starts again)."
            )
    checkpoint = latest_checkpoint(run_dir)
    policy = PeftModel.from_pretrained(copy.deepcopy(base[0]), str(checkpoint_adapter(checkpoint)))
    history = read_jsonl(run_dir / "metrics.jsonl")
    evaluated = held_out(cfg, policy, base[1], args)
    if "choice" in evaluated:  # issue 40: flowgrpo search with the run's own executor calls
        calls = sum(line.get("executor_calls") or 0 for line in history)
        evaluated["choice"]["search"] = searched(cfg, calls, seed, args) if calls else None
    return {
        "seed": seed,
        "world": world.name if world is not None else None,
        "checkpoint": str(checkpoint),
        "steps": len(history),
        "series": {k: series(history, k) for k in SERIES_KEYS},
        "alerts": alert_steps(history),
        "eval": evaluated,
        "wall_minutes": (time.perf_counter() - wall) / 60,
        "cpu_minutes": (time.process_time() - cpu) / 60,
        "torch_threads": torch.get_num_threads(),  # CPU minutes depend on it (--jobs)
        "cpu": cpu_of(),  # and on the machine: bf16 pays only with bf16 units
    }


def cpu_of() -> dict:
    """The CPU a seed's minutes were measured on: its name and whether it multiplies bf16
    natively (an AVX2-only CPU emulates it at about twice float32's time, docs/BENCHMARKS.md)."""
    import platform

    from flowgrpo.operators.models import bf16_emulated, cpu_capabilities

    name = cpu_capabilities().get("cpu_name") or platform.processor() or platform.machine()
    return {"name": name, "bf16_units": not bf16_emulated("cpu")}


def scoring(cfg, args) -> tuple:
    """``(sim, problems)``: the exact scoring settings of ``cfg`` and the held-out problems of
    :func:`held_out` (EvalOptions seed 0), for a pick or a table scored as the policy is."""
    from flowgrpo.operators.executor import executor_limits
    from flowgrpo.operators.simulation.metrics import regret_settings
    from flowgrpo.operators.tasks import load_task

    problems = load_task(cfg.rollout.task, n=args.eval_n, seed=0, split="test")
    return regret_settings(cfg, executor_limits(cfg.executor)), problems


def searched(cfg, calls: int, seed: int, args) -> dict:
    """``flowgrpo search`` with ``calls`` executor calls (the training run's), its pick scored
    exactly on the held-out problems as the policy's samples are."""
    from flowgrpo.trainer.search.run import search

    result = search(cfg, calls, seed=seed)
    sim, problems = scoring(cfg, args)
    pick = result.best.workflow
    return {"workflow": pick, "calls": result.calls, "reward": pick_reward(sim, problems, pick)}


def label_table(args, world) -> dict:
    """The label start's search table (each label's first pick) used as it is, scored exactly on
    the held-out problems: the answer the search alone gives (issue 40)."""
    search, _ = search_files(label_folder(args, world), label_recipe(args), args.config,
                             label_sets(args, world))  # fmt: skip
    data = json.loads(search.read_text(encoding="utf-8"))
    table = {label: found["top"][0]["workflow"] for label, found in data["labels"].items()}
    sim, problems = scoring(config_of(args, None, world), args)
    calls = sum(found["calls"] for found in data["labels"].values())
    return {**table_reward(sim, problems, table, data["by"]), "calls": calls}


def start_eval(args, base, world=None) -> dict:
    """The start policy (the config's init_adapter, else a fresh LoRA) on the held-out set."""
    from flowgrpo.trainer.loop import setup

    cfg = config_of(args, None, world)
    policy, tokenizer = setup.policy(cfg, model=copy.deepcopy(base[0]), tokenizer=base[1])
    return held_out(cfg, policy, tokenizer, args)


def adapter_digest(path) -> str | None:
    """The sha256 of an adapter folder's weights and adapter config (None without one): a start
    re-made in the same folder is a different start."""
    import hashlib

    folder = Path(path) if path else None
    if folder is None or not folder.is_dir():
        return None
    digest = hashlib.sha256()
    for file in sorted(folder.glob("adapter_*")):
        digest.update(file.name.encode() + file.read_bytes())
    return digest.hexdigest()


def start_key(args, world) -> list:
    """What the start's held-out numbers depend on: world, eval size, sampler, the resolved sections
    that sample, score and evaluate (less TRAINING_ONLY) and the start adapter's own bytes."""
    from flowgrpo.configuration import to_dict

    cfg = config_of(args, None, world)
    sections = {name: to_dict(getattr(cfg, name))
                for name in ("model", "lora", "rollout", "executor", "rewards")}  # fmt: skip
    sections["rollout"] = {k: v for k, v in sections["rollout"].items() if k not in TRAINING_ONLY}
    return [world.name if world else "config", args.eval_n, args.eval_k, SAMPLER_VERSION,
            sections, adapter_digest(cfg.model.init_adapter)]  # fmt: skip


def cached_start(args, base, world) -> dict:
    """The start's held-out numbers, reused from OUT/start-*.json when :func:`start_key` is the
    same (the config's content and the adapter's bytes, not only their names)."""
    import hashlib

    key = start_key(args, world)
    digest = hashlib.sha256(json.dumps(key, default=str, sort_keys=True).encode()).hexdigest()
    path = Path(args.out) / f"start-{key[0]}-{digest[:12]}.json"
    if path.exists() and not args.smoke:
        return json.loads(path.read_text(encoding="utf-8"))
    start = start_eval(args, base, world)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(start), encoding="utf-8")
    return start


def check_figure(args, worlds: list) -> None:
    """Before any training: a file of the user's where the section's figure goes ends the study
    now, not after its seeds trained."""
    from flowgrpo.trainer.reports.plots import check_replaceable

    if not args.no_write and len(worlds) == 1:
        try:
            check_replaceable(figure_of(json_path(args)))
        except FileExistsError as exc:
            sys.exit(f"error: {exc}")


def checked_worlds(args) -> list:
    """Every world file and every run's config read before any training: a bad path, world or
    ``--set`` ends the script at once with the reason, not after the first worlds have run."""
    from flowgrpo.configuration import ConfigError
    from flowgrpo.operators.simulation.worlds import load_world

    try:
        worlds = [load_world(w) for w in args.worlds] or [None]
        for world in worlds:
            config_of(args, None, world)
    except (ConfigError, ValueError, OSError) as exc:
        sys.exit(f"error: {exc}")
    return worlds


def seed_task(task: tuple) -> dict:
    """One seed in a worker process of ``--jobs``: ``(args, world file or None, seed)``; the
    worker loads its own base model (a picklable task, no state shared with the parent)."""
    from flowgrpo.operators.simulation.worlds import load_world

    args, world_file, seed = task
    world = load_world(world_file) if world_file is not None else None
    return train_and_eval(args, seed, base_model(config_of(args, None)), world)


def trained(args, plan: list, base):
    """Each planned ``(world file, world, seed)`` trained and evaluated, as its run finishes:
    in this process, or ``--jobs`` seeds at a time in worker processes."""
    from concurrent.futures.process import BrokenProcessPool

    from studylib.pool import run_pool

    if args.jobs == 1:
        for _, world, seed in plan:
            yield train_and_eval(args, seed, base, world)
        return
    tasks = [(args, world_file, seed) for world_file, _, seed in plan]
    try:
        for _, run in run_pool(seed_task, tasks, args.jobs, args.threads):
            yield run
    except (BrokenProcessPool, KeyboardInterrupt) as exc:
        sys.exit(f"a worker stopped ({type(exc).__name__}): seeds that finished are saved; "
                 "run the same command with --resume to continue")  # fmt: skip


def main(argv=None) -> None:
    args = parse_args(argv)
    worlds = checked_worlds(args)
    check_figure(args, worlds)
    results: dict = resumed(args)  # worlds not run now stay in the file as they were
    base = base_model(config_of(args, None))
    plan = []
    owned = frozenset(w.name if w is not None else "config" for w in worlds)
    for world_file, world in zip(args.worlds or [None], worlds):
        name = world.name if world is not None else "config"
        if args.label_keys:
            recipe, sets = label_recipe(args), label_sets(args, world)
            build_label_start(recipe, args.config, sets, label_folder(args, world))
        start = cached_start(args, base, world)
        if args.label_keys and "choice" in start:
            start["choice"]["table"] = label_table(args, world)
        print(f"[{name}] start: {start}", flush=True)
        results[name] = {"start": start, "runs": results.get(name, {}).get("runs", [])}
        kept = {run["seed"] for run in results[name]["runs"]}
        if kept:
            print(f"[{name}] --resume: seeds {sorted(kept)} kept from {json_path(args)}")
        plan += [(world_file, world, s) for s in args.seeds if s not in kept]
    for run in trained(args, plan, base):
        name = run["world"] or "config"
        results[name]["runs"] = sorted([*results[name]["runs"], run], key=lambda r: r["seed"])
        minutes = run["wall_minutes"]
        print(f"[{name}] seed {run['seed']}: {run['eval']} ({minutes:.1f} min)", flush=True)
        save(args, results, owned)
    if not args.no_write and len(worlds) == 1:  # the world this process ran, by this tag
        only = results[next(iter(owned))]
        print(f"wrote {write(args, only['start'], only['runs'], json_path(args))}")
    print(f"wrote {save(args, results, owned)}")
    print(f"wrote {write_choice(args, results)}")


if __name__ == "__main__":
    main()
