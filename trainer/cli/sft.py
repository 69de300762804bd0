"""Body of ``flowgrpo sft``: format SFT of a fresh LoRA adapter (``trainer.loop.sft``)."""

from __future__ import annotations

import json
from pathlib import Path

import click
from tqdm import tqdm

from flowgrpo.configuration import ConfigError
from flowgrpo.trainer.cli.common import console_logging, fail, is_quiet, progress, status
from flowgrpo.trainer.cli.train import resolve_config


def sft_command(config_path, overrides, out, json_out) -> None:
    """Train, print one line per held-out check and the summary; ``--json`` writes it too."""
    cfg = resolve_config(config_path, overrides, None, None)
    if Path(out).exists() and any(Path(out).iterdir()):
        fail(f"{out} is not empty: give a new folder for the adapter (--out)")
    console_logging()
    # heavy: torch (the loop); `flowgrpo validate` starts without it
    from flowgrpo.trainer.loop.sft import run_sft

    s = cfg.sft
    status(f"format SFT of {cfg.model.name_or_path!r}: data {s.data}, up to {s.max_steps} "
           f"steps, stop at held-out validity {s.target_validity}")  # fmt: skip
    bar = progress(total=s.max_steps, desc="sft", unit="step")

    def on_step(line: dict) -> None:
        if line["step"]:
            bar.update(1)
        if "validity" in line and not is_quiet():
            loss = f"loss {line['loss']:.3f} " if "loss" in line else ""
            tqdm.write(f"step {line['step']}: {loss}held-out validity {line['validity']:.2f} "
                       f"fallback {line['fallback']:.2f} distinct valid "
                       f"{line['distinct_valid']}")  # fmt: skip

    try:
        summary = run_sft(cfg, out, on_step)
    except (ConfigError, ValueError, FileNotFoundError, OSError) as exc:
        bar.close()
        fail(str(exc))
    bar.close()
    try:
        if json_out:
            Path(json_out).write_text(json.dumps(summary, indent=2), encoding="utf-8")
    except OSError as exc:  # the adapter is saved: say so rather than end in a traceback
        fail(f"--json {json_out}: could not write the summary ({exc}); the adapter is in {out}")
    click.echo(
        f"format SFT of {summary['model']}: validity {summary['validity']:.2f}, fallback "
        f"{summary['fallback']:.2f} on {summary['eval_samples']} held-out samples at "
        f"T={summary['temperature']} after {summary['steps']} steps; adapter saved to {out} "
        f"(start RL from it: --set model.init_adapter={out})"
    )
