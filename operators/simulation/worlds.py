"""Worlds: named settings of the SIMULATED executor whose best workflow is known exactly.

A world is a YAML file (``configs/worlds/*.yaml``, documented in ``configs/worlds/README.md``)::

    name: answer-ensembles
    summary: An ensemble of three AnswerGenerate calls wins.
    simulation: {programmer_correct: [0.6, 0.5, 0.4], latent_spread: 1.0,
                 templates: {rates: {programmer_crash: 0.6}}}   # optional: skill by template
    rewards: {weights: {cost: 1.0}}            # optional

``simulation`` overrides :class:`SimulationParams` (missing fields keep the documented
defaults); ``rewards`` is merged into the run's ``rewards`` section, so a world can change the
trade-off the run optimises (a cost-weighted world). :func:`load_world` checks every key and
value and raises ``ValueError`` naming the file, the key and the fix. A world is a simulation:
its numbers say whether the RL finds the better workflow, not how well an LLM solves problems.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flowgrpo.configuration import load_yaml
from flowgrpo.files import read_text
from flowgrpo.operators.simulation.params import SimulationParams

WORLD_KEYS = ("name", "summary", "simulation", "rewards")
REWARD_KEYS = ("weights", "options")


@dataclass(frozen=True)
class World:
    """One world of the simulated executor.

    Attributes:
        name: short name (run folders, tables).
        summary: one line: what wins in this world and why.
        simulation: the overrides as written (plain data, for a config's ``params``).
        params: the full :class:`SimulationParams` (defaults plus the overrides).
        reward_weights: merged into the run's ``rewards.weights`` (may be empty).
        reward_options: merged into the run's ``rewards.options`` (may be empty).
        path: the file it was read from (None when built from data).
    """

    name: str
    summary: str
    simulation: Mapping[str, Any] = field(default_factory=dict)
    params: SimulationParams = field(default_factory=SimulationParams)
    reward_weights: Mapping[str, float] = field(default_factory=dict)
    reward_options: Mapping[str, Any] = field(default_factory=dict)
    path: str | None = None


def world_from_dict(data: Any, name: str = "world", path: str | None = None) -> World:
    """A :class:`World` from plain data; ``ValueError`` names the key and the fix."""
    where = path or name
    if not isinstance(data, Mapping):
        raise ValueError(f"world {where}: expected a mapping with keys {WORLD_KEYS}, got "
                         f"{type(data).__name__}")  # fmt: skip
    unknown = sorted(set(data) - set(WORLD_KEYS))
    if unknown:
        raise ValueError(f"world {where}: unknown keys {unknown}; a world has {WORLD_KEYS}")
    simulation = data.get("simulation") or {}
    try:
        params = SimulationParams.from_dict(simulation)
    except ValueError as exc:
        raise ValueError(f"world {where}: simulation: {exc}") from None
    weights, options = _rewards(data.get("rewards") or {}, where)
    return World(
        name=str(data.get("name") or name),
        summary=str(data.get("summary") or ""),
        simulation=dict(simulation),
        params=params,
        reward_weights=weights,
        reward_options=options,
        path=path,
    )


def _rewards(section: Any, where: str) -> tuple[dict, dict]:
    if not isinstance(section, Mapping):
        raise ValueError(f"world {where}: rewards must be a mapping with keys {REWARD_KEYS}")
    unknown = sorted(set(section) - set(REWARD_KEYS))
    if unknown:
        raise ValueError(f"world {where}: rewards: unknown keys {unknown}; use {REWARD_KEYS}")
    weights = dict(section.get("weights") or {})
    for key, value in weights.items():
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or value < 0:
            raise ValueError(f"world {where}: rewards.weights.{key} = {value!r}; use a number "
                             ">= 0")  # fmt: skip
    options = section.get("options") or {}
    if not isinstance(options, Mapping):
        raise ValueError(f"world {where}: rewards.options must be a mapping")
    return weights, dict(options)


def load_world(path: str | Path) -> World:
    """The world in a YAML file (see the module docstring)."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"world file {p} does not exist; see configs/worlds/ for the worlds")
    data = load_yaml(read_text(p), f"world file {p}")
    if data is None:  # read as the default world, a cut-off copy would go unnoticed
        raise ValueError(f"world file {p} is empty; write at least `simulation: {{}}` (the "
                         "documented defaults), see configs/worlds/README.md")  # fmt: skip
    return world_from_dict(data, name=p.stem, path=str(p))


__all__ = ["REWARD_KEYS", "WORLD_KEYS", "World", "load_world", "world_from_dict"]
