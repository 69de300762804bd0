"""Argument checks the study tools share, made before any work (a count of 0 crashed at the
end of a run, or after a warm-up study)."""

from __future__ import annotations

import argparse


def refuse_below_one(parser: argparse.ArgumentParser, args, names: tuple[str, ...]) -> None:
    """A usage error (exit 2) naming the option when one of the counts ``names`` (attribute
    names; None: not given) is below 1."""
    for name in names:
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {value}")
