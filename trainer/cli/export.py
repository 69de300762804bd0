"""Body of ``flowgrpo export``: a checkpoint merged into its base model, as a model folder."""

from __future__ import annotations

import click

from flowgrpo.trainer.cli.common import fail, resolve_device, status


def export_command(checkpoint, merge, device, dtype, overwrite) -> None:
    """Merge ``checkpoint``'s adapter into the run's base model and save it at ``merge``."""
    if not merge:
        fail("give --merge OUT: the folder to write the merged model to")
    device = resolve_device(device)
    # heavy: torch, transformers and peft; `flowgrpo validate` starts without them
    from flowgrpo.trainer.reports.export import export_merged

    status(f"merging {checkpoint} into its base model ({device}) ...")
    try:
        out = export_merged(checkpoint, merge, device=device, dtype=dtype, overwrite=overwrite)
    except (ValueError, FileNotFoundError, FileExistsError, OSError, ImportError) as exc:
        fail(str(exc))
    click.echo(f"exported {out} (AutoModelForCausalLM.from_pretrained({str(out)!r}))")
