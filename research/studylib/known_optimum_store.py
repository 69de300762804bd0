"""The known-optimum study's saved numbers: ``OUT/known_optimum[-TAG].json`` (where, what
``--resume`` keeps, each save whole) and its choice table beside it. Used by
``research/learn_known_optimum.py``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from flowgrpo.files import read_text, replace_text
from studylib.choice import choice_markdown


def json_path(args) -> Path:
    return Path(args.out) / (f"known_optimum-{args.tag}.json" if args.tag else "known_optimum.json")


def resumed(args) -> dict:
    """With ``--resume``: OUT's JSON for this tag, per world (start and runs), every seed and
    world kept so that a save never drops what an earlier session measured (empty without the
    flag or without a file). A file made with other overrides is an error: its seeds would be
    mixed with runs of another setting."""
    path = json_path(args)
    if not args.resume or not path.exists():
        return {}
    try:
        data = json.loads(read_text(path))
    except ValueError as exc:  # a study killed while saving, before saves were whole
        sys.exit(f"error: --resume: {path} does not read as JSON ({exc}); restore it, or drop "
                 "--resume to start over (another --tag keeps both)")  # fmt: skip
    made = (data.get("overrides"), data.get("rl_overrides", []))
    if made != (args.overrides, args.rl_overrides):
        sys.exit(
            f"error: --resume: {path} was made with --set {made[0]} --set-rl {made[1]}, not "
            f"{args.overrides} {args.rl_overrides}; use another --tag or --out, or drop "
            "--resume to start over"
        )
    return {
        name: {"start": world.get("start", {}), "runs": list(world.get("runs", []))}
        for name, world in data.get("worlds", {}).items()
    }


def save(args, results: dict, owned: frozenset[str] | None = None) -> Path:
    """The results so far as ``OUT/known_optimum[-TAG].json`` (written after every seed). With
    ``--resume`` the worlds this process does not run (``owned``: the ones it does) are taken
    from the file as it is now, not as it was read at the start, so another study of the same
    tag running other worlds loses nothing it saved in between."""
    path = json_path(args)
    path.parent.mkdir(parents=True, exist_ok=True)
    if owned is not None and args.resume and path.exists():
        now = json.loads(path.read_text(encoding="utf-8")).get("worlds", {})
        results = {**results, **{k: v for k, v in now.items() if k not in owned}}
    data = {"tag": args.tag, "overrides": args.overrides, "rl_overrides": args.rl_overrides,
            "worlds": results}  # fmt: skip
    if len(results) == 1:  # one world: also at the top level, as before worlds existed
        data.update(next(iter(results.values())))
    replace_text(path, json.dumps(data, indent=1))  # whole: a kill mid-save keeps the last
    return path


def write_choice(args, results: dict) -> Path:
    """Every world's choice table (issue 40) in ``OUT/known_optimum[-TAG]-choice.md``."""
    path = json_path(args).with_name(json_path(args).stem + "-choice.md")
    command = f"python research/learn_known_optimum.py {' '.join(sys.argv[1:])}"
    replace_text(path, choice_markdown(results, command) + "\n")
    return path
