"""The ``flowgrpo`` command line: the click group and every command's options.

Thin: each command only declares its options and calls its body in :mod:`.dsl` (validate,
run), :mod:`.train`, :mod:`.reports` (diagnose, analyze), :mod:`.evaluate` (eval) or
:mod:`.export` (export). Every command takes ``--quiet`` and ``--log-level``
(:func:`.common.output_options`).

Exit codes: 0 success; 1 the command ran and found a problem (an invalid workflow); 2 usage
errors (bad option, missing file, bad config); 3 ``train`` stopped on an alert; 130 / 143
``train`` stopped by SIGINT (Ctrl-C) / SIGTERM after saving the step under way (see
``loop.interrupt``; it prints the ``--resume`` command).
"""

from __future__ import annotations

import click

from flowgrpo.dsl import DOMAINS
from flowgrpo.trainer.cli.common import (
    DEVICE_HELP,
    DTYPES,
    config_options,
    count_option,
    file_option,
    output_file_option,
    output_options,
)
from flowgrpo.trainer.cli.dsl import run_workflow_command, validate_command
from flowgrpo.trainer.cli.evaluate import eval_command
from flowgrpo.trainer.cli.export import export_command
from flowgrpo.trainer.cli.reports import analyze_command, diagnose_command
from flowgrpo.trainer.cli.search import search_cmd
from flowgrpo.trainer.cli.sft import sft_command
from flowgrpo.trainer.cli.train import train_command
from flowgrpo.trainer.reports.evaluate import EvalSettings

#: ``flowgrpo --help`` lists the commands in the order a user meets them, not alphabetically.
COMMAND_ORDER = (
    "train", "sft", "eval", "diagnose", "analyze", "search", "validate", "run", "export",
)  # fmt: skip


class _InOrder(click.Group):
    def list_commands(self, ctx) -> list[str]:
        known = [name for name in COMMAND_ORDER if name in self.commands]
        return known + sorted(set(self.commands) - set(known))


@click.group(cls=_InOrder, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="flowgrpo")
def main() -> None:
    """flowgrpo: train a language model to write workflow programs with GRPO-family RL.

    A workflow is a short program in an AFlow-style DSL, e.g.
    'Custom -> Programmer -> Review ? Revise : done'. Run 'flowgrpo COMMAND --help' for details.

    \b
    Start here:
      flowgrpo train --config configs/tiny.yaml   # a tiny random model: the whole loop in seconds
      flowgrpo train                              # SmolLM2-135M on the CPU, 20-30 minutes
      flowgrpo diagnose runs/default              # what the run did, with plots
      flowgrpo eval runs/default --all            # every checkpoint on held-out problems
    """


@main.command("validate")
@click.argument("workflows", nargs=-1)
@click.option(
    "--file",
    "-f",
    "files",
    multiple=True,
    type=click.File("r", encoding="utf-8"),
    help="Read inputs from FILE, one per line ('-' for stdin). Repeatable.",
)
@click.option(
    "--extract",
    "do_extract",
    is_flag=True,
    help="Treat inputs as raw model output: find the workflow in each first.",
)
@click.option(
    "--domain",
    type=click.Choice(DOMAINS),
    help="Check operators against this problem domain's allowed set.",
)
@file_option(
    "--operators",
    "operators_file",
    "YAML/JSON operator table (name, role, domains, description): a list adds to the "
    "AFlow set; {extends: none, operators: [...]} replaces it.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per input.")
@output_options
def validate_cmd(workflows, files, do_extract, domain, operators_file, as_json) -> None:
    """Validate workflows given as arguments or in files.

    Prints, per input, valid/invalid with the canonical form and structure, and every problem
    with a caret under its column. Exit 0 when all inputs are valid, 1 when any is invalid,
    2 on usage errors.

    \b
    Examples:
      flowgrpo validate "Custom -> Programmer -> Review ? Revise : done"
      flowgrpo validate --file outputs.txt --extract --json
      flowgrpo validate --operators my_operators.yaml "Custom -> Critique ? Revise : done"
    """
    validate_command(workflows, files, do_extract, domain, as_json, operators_file)


def model_options(source: str, what: str):
    """``--device``, ``--dtype`` and ``--executor-max-new-tokens`` of ``flowgrpo run`` and
    ``flowgrpo eval``; ``source``: the option whose run gives the defaults (``--checkpoint``,
    ``--adapter``); ``what``: the model the device and dtype are for."""

    def apply(fn):
        fn = click.option(
            "--executor-max-new-tokens", type=click.IntRange(min=1),
            help="Tokens per executor call (executor.max_new_tokens). [default: 160; with "
            f"{source} the run's]",
        )(fn)  # fmt: skip
        fn = click.option(
            "--dtype", type=click.Choice(DTYPES),
            help=f"{what} weights. [default: float32; with {source} the run's model.dtype]",
        )(fn)  # fmt: skip
        return click.option(
            "--device", default="cpu", show_default=True, help=f"{what}: {DEVICE_HELP}"
        )(fn)

    return apply


@main.command("run")
@click.argument("workflow")
@click.option(
    "--task",
    default="arithmetic",
    show_default=True,
    help="arithmetic[:easy|medium|hard], gsm8k:PATH, mbpp:PATH or humaneval.",
)
@count_option("--n", "Number of problems.", 3)
@click.option(
    "--split",
    default="test",
    show_default=True,
    type=click.Choice(["train", "test"]),
    help="Which split of a generated task (arithmetic) to draw from.",
)
@click.option("--seed", default=0, show_default=True, help="Seed of the task generator.")
@click.option(
    "--executor",
    default=None,
    metavar="KIND",
    help="Sets executor.kind: hf (an in-process model), openai (an OpenAI-compatible server), "
    "shared (with --checkpoint: the run's base model) or a backend kind (a plugin's). "
    "[default: hf; with --checkpoint the run's executor.kind]",
)
@click.option(
    "--model",
    default=None,
    help="hf: 'default' (embedded SmolLM2-135M) or a local path / hub id; "
    "openai: the served model name (or FLOWGRPO_EXECUTOR_MODEL). [default: 'default'; with "
    "--checkpoint the run's]",
)
@click.option(
    "--base-url",
    default=None,
    help="openai: server URL, e.g. http://localhost:8000/v1 (or FLOWGRPO_EXECUTOR_BASE_URL).",
)
@click.option(
    "--trace/--no-trace",
    default=True,
    show_default=True,
    help="Show every LLM call and sandbox run.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per problem.")
@click.option(
    "--checkpoint",
    type=click.Path(exists=True),
    help="RUN_DIR or RUN_DIR/checkpoint-N: execute as that run's executor did (see below).",
)
@model_options("--checkpoint", "In-process model")
@click.option(
    "--plugin",
    "plugins",
    multiple=True,
    metavar="MODULE_OR_FILE",
    help="Import this plugin first (a module name or a .py file; repeatable), as a config's "
    "plugins: list does: your operators, executor backends and metrics hooks. With "
    "--checkpoint the run's plugins are imported too.",
)
@output_options
def run_cmd(**options) -> None:
    """Run WORKFLOW on problems of a task with an executor LLM and show trace and score.

    The executor is an ``executor`` config section: the defaults (kind hf), or with
    --checkpoint the run's (kind shared = the run's base model, model.name_or_path/gguf_file/
    dtype; hf = executor.model; openai = executor.model/base_url, with its timeout_s,
    max_retries and backoff_s; any other kind), with its token budget and per-workflow limits
    (executor.max_calls, max_seconds). Options given override its fields.

    \b
    Example:
      flowgrpo run "Programmer -> Review ? Revise : done" --task arithmetic --n 5
    """
    run_workflow_command(**options)


@main.command("train")
@config_options(
    "YAML config (default: the embedded CPU default; see configs/).",
    "--set rollout.num_generations=16",
)
@count_option("--max-steps", "Shortcut for optim.max_steps.")
@click.option("--output-dir", help="Shortcut for logging.output_dir (the run directory).")
@click.option(
    "--resume",
    is_flag=True,
    help="Continue from the last checkpoint in the run dir (an error when there is none, or "
    "when the config changes the model or the LoRA shape). A run keeps its last "
    "logging.keep_checkpoints checkpoints (default 2, 0 = all) and logs each deletion.",
)
@click.option(
    "--overwrite",
    is_flag=True,
    help="The run dir already holds a run: delete what that run wrote (the names its "
    "flowgrpo-run.json lists, its checkpoints) and start again. Without it such a dir is "
    "refused; a dir without flowgrpo-run.json is refused even with it.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Check the config and print the resolved config and a memory estimate; load no weights.",
)
@output_options
def train_cmd(config_path, overrides, max_steps, output_dir, resume, overwrite, dry_run) -> None:
    """Train a workflow generator with LoRA GRPO.

    With no options: SmolLM2-135M-Instruct (embedded, CPU), arithmetic problems, LoRA r16, K=8,
    20-30 minutes on 2 cores (measured, three seeds). Writes RUN_DIR/metrics.jsonl (one line per
    step), samples.jsonl, config.yaml and checkpoint-N/ directories (adapter loadable with
    PeftModel.from_pretrained). Health alerts print as they happen. A first try in seconds:
    --config configs/tiny.yaml (a tiny random model; the configs/ folder has the others).

    \b
    Exit codes: 0 done; 2 bad config or usage (also: a run dir that already holds a run without
    --resume/--overwrite, --resume with no checkpoint); 3 stopped on an alert in health.stop_on;
    1 a checkpoint could not be written (disk full, read-only); 130 / 143 stopped by Ctrl-C /
    SIGTERM: the step under way is finished and saved first (a second signal stops at once
    without saving), then the command that resumes the run is printed.
    """
    train_command(config_path, overrides, max_steps, output_dir, resume, dry_run, overwrite)


@main.command("sft")
@config_options(
    "YAML config: its model, lora, task, prompt, sampling and sft section (see configs/).",
    "--set sft.lr=1e-3 or --set sft.data=jsonl:pairs.jsonl",
)
@click.option(
    "--out",
    required=True,
    type=click.Path(file_okay=False),
    help="A new folder for the adapter (and its config.yaml).",
)
@output_file_option("--json", "json_out", "Also write the summary.")
@output_options
def sft_cmd(config_path, overrides, out, json_out) -> None:
    """Format SFT: teach a fresh LoRA adapter to write the workflow DSL, to start RL from.

    Cross-entropy on the completion tokens of (policy prompt -> workflow) pairs: workflows drawn
    from the run's operator table (sft.data: grammar, stratified so no workflow dominates) or
    your JSONL of {"question", "workflow"} objects (sft.data: jsonl:PATH). Held-out validity is
    measured by sampling validation problems at the rollout temperature; training stops at
    sft.target_validity (default 0.45: a partly trained start; null: all sft.max_steps). The
    adapter has the config's LoRA shape: start training from it with --set
    model.init_adapter=OUT.

    \b
    Example:
      flowgrpo sft --config configs/known-optimum.yaml --out runs/format-sft-full/adapter
    """
    sft_command(config_path, overrides, out, json_out)


@main.command("diagnose")
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--no-plots", is_flag=True, help="Do not write PNG plots.")
@output_options
def diagnose_cmd(run_dir, as_json, no_plots) -> None:
    """Health report of a finished or running run, and plots in RUN_DIR/plots/.

    Lists every check (entropy, deadlock, frozen length, zero gradient, step time, K=2
    advantage signature, fallback rate, update -> collapse) with PASS/ALERT and the steps where
    it fired, the collapse rate (collapses / updates), rollbacks and the first deadlock step.
    """
    diagnose_command(run_dir, as_json, not no_plots)


@main.command("analyze")
@click.argument("run_dir", required=False, type=click.Path(file_okay=False))
@file_option(
    "--samples", "samples_file", "Any JSONL file with a completion text field (instead of RUN_DIR)."
)
@click.option(
    "--field", default="completion", show_default=True, help="Name of the completion text field."
)
@count_option("--top", "How many of the most frequent workflows to list.", 10)
@count_option("--window", "Trend window in rows (default: per step when rows have 'step').")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--plots",
    "plots_dir",
    type=click.Path(file_okay=False),
    help="Write bar charts here (default: RUN_DIR/plots when RUN_DIR is given).",
)
@output_options
def analyze_cmd(run_dir, samples_file, field, top, window, as_json, plots_dir) -> None:
    """DSL diversity report of model outputs: valid vs fallback, distinct workflows, top
    workflows, operator frequencies, structure classes and trends.

    RUN_DIR's samples are validated as the run's reward validated them (the operators of its
    config.yaml and its executor's call budget); --samples FILE with the default operators
    and call count."""
    analyze_command(run_dir, samples_file, field, top, window, as_json, plots_dir)


@main.command("eval")
@click.argument("run_dir", required=False, type=click.Path())
@click.option(
    "--all",
    "all_checkpoints",
    is_flag=True,
    help="Evaluate every checkpoint of RUN_DIR (the model loaded once, adapters swapped): a "
    "table, RUN_DIR/eval_all.json (or --json FILE) and a plot beside it (eval_all.png).",
)
@click.option("--adapter", type=click.Path(), help="RUN_DIR/checkpoint-N to evaluate.")
@click.option("--base", is_flag=True, help="Evaluate the untrained base model instead.")
@click.option(
    "--search",
    type=click.Path(),
    help="Evaluate a `flowgrpo search --out` result instead of a model: its first pick for "
    "every problem, or with --by each problem's own label's first pick, scored like a "
    "policy's samples; with a checkpoint, in that run's task, executor and limits (the "
    "policy's baseline: compare the two with --compare).",
)
@click.option(
    "--model",
    default=None,
    help="Base model ('default', 'tiny-random', a path or hub id); default: the one in "
    "the run's config.yaml, else 'default'.",
)
@click.option(
    "--task",
    default=None,
    help="arithmetic[:level] (test split), gsm8k:PATH, mbpp:PATH, humaneval or jsonl:PATH. "
    "Default: the run's rollout.task for a checkpoint (said on the console), else arithmetic.",
)
@count_option("--n", "Number of held-out problems.", 20)
@count_option("--k", "Workflows per problem (greedy when 1; pass@k reported when > 1).", 1)
@count_option(
    "--batch",
    "Problems sampled in one generate call (--batch x --k rows at once): larger is "
    "faster per problem and needs more memory; the distribution sampled is the same.",
    EvalSettings.batch,
)
@click.option(
    "--executor",
    default=None,
    metavar="KIND",
    help="Sets executor.kind: hf (the base weights in-process), openai (an OpenAI-compatible "
    "server) or a backend kind (a plugin's, whose metrics hooks report too, e.g. sim/*). "
    "[default: hf; with --adapter the run's executor.kind]",
)
@click.option(
    "--base-url",
    help="executor.base_url: the openai server URL (or FLOWGRPO_EXECUTOR_BASE_URL).",
)
@click.option("--executor-model", help="executor.model: the openai executor's served model name.")
@click.option("--no-execute", is_flag=True, help="Only validity/diversity; do not run workflows.")
@output_file_option(
    "--json", "json_out", "Also write the result as JSON to this file ('-' for stdout only)."
)
@click.option(
    "--compare",
    nargs=2,
    type=click.Path(exists=True, dir_okay=False),
    help="Print two saved evaluations side by side and exit.",
)
@model_options("--adapter", "Model")
@count_option(
    "--max-new-tokens",
    "Workflow budget. [default: 40; with --adapter the run's rollout.max_new_tokens]",
)
@click.option(
    "--temperature",
    type=click.FloatRange(min=0, min_open=True),
    help="Sampling when --k > 1. [default: 0.8; with --adapter the run's rollout.temperature]",
)
@click.option(
    "--constrained",
    type=click.Choice(["off", "grammar"]),
    help="Sample only what the workflow grammar accepts (docs/CONSTRAINED.md). [default: off; "
    "with --adapter the run's rollout.constrained]",
)
@output_options
def eval_cmd(**options) -> None:
    """Evaluate a trained workflow generator (or the base model) on held-out problems.

    Reports validity and fallback rates, execution accuracy (pass@1, pass@k), distinct
    workflows, operators, structures, executor calls and tokens per problem, and time.

    A checkpoint is evaluated as trained: with --adapter, the run's config.yaml gives the
    defaults of the base model (model.name_or_path, gguf_file, dtype; tiny-random's seed),
    the workflow budget and sampling (rollout.max_new_tokens, temperature, top_p,
    constrained) and the
    ``executor`` section: the executor (executor.kind and its settings: model, base_url,
    timeout_s, max_retries, backoff_s), its token budget (executor.max_new_tokens) and
    per-workflow limits (executor.max_calls, max_seconds). Options given override its fields.

    RUN_DIR/checkpoint-N as the argument is --adapter; RUN_DIR --all evaluates every
    checkpoint of the run with these options, one row per checkpoint.

    \b
    Examples:
      flowgrpo eval --base --n 20 --json base.json
      flowgrpo eval --adapter runs/default/checkpoint-30 --n 20 --json trained.json
      flowgrpo eval --compare base.json trained.json
      flowgrpo eval runs/default --all --n 20
      flowgrpo eval runs/default/checkpoint-30 --search search.json --json pick.json
    """
    eval_command(**options)


@main.command("export")
@click.argument("checkpoint", type=click.Path(exists=True, file_okay=False), required=False)
@click.option(
    "--merge",
    "merge",
    metavar="OUT",
    type=click.Path(),
    help="Write the base model with the adapter merged in (or, with --base, the model alone) "
    "to the folder OUT (required).",
)
@click.option(
    "--base",
    metavar="MODEL",
    help="Export MODEL itself instead of a checkpoint ('default': the embedded SmolLM2 GGUF, "
    "dequantized), e.g. for transformers serve.",
)
@click.option("--device", default="cpu", show_default=True, help="Where to merge: " + DEVICE_HELP)
@click.option(
    "--dtype",
    type=click.Choice(DTYPES),
    help="dtype of the saved weights. [default: the run's model.dtype]",
)
@click.option(
    "--overwrite",
    is_flag=True,
    help="OUT holds an earlier export: replace the files it lists (nothing else is touched).",
)
@output_options
def export_cmd(checkpoint, merge, base, device, dtype, overwrite) -> None:
    """Export RUN_DIR/checkpoint-N as one standard Hugging Face model folder.

    Loads the run's base model (its config.yaml: model.name_or_path, gguf_file; the embedded
    GGUF default is dequantized), merges the LoRA adapter into it (peft merge_and_unload, in
    float32) and saves safetensors weights, config, generation config and tokenizer. OUT loads
    with AutoModelForCausalLM.from_pretrained(OUT) and serves with vLLM or TGI.

    \b
    Examples:
      flowgrpo export runs/default/checkpoint-30 --merge models/flowgrpo-30
      flowgrpo export --base default --merge models/smollm2   # the base model alone
    """
    export_command(checkpoint, merge, base, device, dtype, overwrite)


main.add_command(search_cmd)


if __name__ == "__main__":  # accelerate launch -m flowgrpo.trainer.cli train ...
    main()
