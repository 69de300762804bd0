"""Body of ``flowgrpo export``: a checkpoint merged into its base model (or a base model alone),
as a model folder."""

from __future__ import annotations

import click

from flowgrpo.trainer.cli.common import device_option, fail, status


def export_command(checkpoint, merge, base, device, dtype, overwrite) -> None:
    """Merge ``checkpoint``'s adapter into the run's base model and save it at ``merge``; with
    ``base`` (and no checkpoint) save that model alone."""
    if not merge:
        fail("give --merge OUT: the folder to write the model to")
    if (checkpoint is None) == (base is None):
        fail("give a CHECKPOINT (RUN_DIR/checkpoint-N) or --base MODEL, one of the two")
    device = device_option(device)
    # heavy: torch, transformers and peft; `flowgrpo validate` starts without them
    from flowgrpo.trainer.reports.export import export_base, export_merged

    try:
        if base is not None:
            status(f"exporting {base} ...")
            out = export_base(base, merge, dtype=dtype or "float32", overwrite=overwrite)
        else:
            status(f"merging {checkpoint} into its base model ({device}) ...")
            out = export_merged(checkpoint, merge, device=device, dtype=dtype, overwrite=overwrite)
    except (ValueError, FileNotFoundError, FileExistsError, OSError, ImportError) as exc:
        fail(str(exc))
    click.echo(f"exported {out} (AutoModelForCausalLM.from_pretrained({str(out)!r}))")
