"""Evaluate every checkpoint of a run (and the base model) into one Markdown and CSV table.

    python scripts/eval_checkpoints.py runs/default --n 20 [--k 1] [--task arithmetic]

Thin: calls ``flowgrpo eval`` for each checkpoint-N in RUN_DIR (plus ``--base``), then writes
RUN_DIR/eval/table.md and table.csv from the JSON results.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

from flowgrpo.trainer.loop.checkpoint import list_checkpoints
from flowgrpo.trainer.reports.evaluate import COMPARE_KEYS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--k", type=int, default=1)
    parser.add_argument("--task", default="arithmetic")
    args = parser.parse_args()
    run_dir = Path(args.run_dir)
    out = run_dir / "eval"
    out.mkdir(exist_ok=True)
    targets = [("base", ["--base", "--model", _model(run_dir)])]
    targets += [(path.name, ["--adapter", str(path)]) for _, path in list_checkpoints(run_dir)]
    rows = []
    for name, source in targets:
        result = out / f"{name}.json"
        cmd = [
            sys.executable,
            "-m",
            "flowgrpo.trainer.cli.app",
            "eval",
            *source,
            "--task",
            args.task,
            "--n",
            str(args.n),
            "--k",
            str(args.k),
            "--json",
            str(result),
        ]
        subprocess.run(cmd, check=True)
        rows.append({**json.loads(result.read_text(encoding="utf-8")), "model": name})
    keys = [*COMPARE_KEYS, f"pass@{args.k}"] if args.k > 1 else list(COMPARE_KEYS)
    with (out / "table.csv").open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["model", *keys])
        writer.writerows([[r["model"], *(r.get(k) for k in keys)] for r in rows])
    lines = ["| model | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    lines += [
        "| " + r["model"] + " | " + " | ".join(f"{r.get(k, float('nan')):.3f}" for k in keys) + " |"
        for r in rows
    ]
    (out / "table.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


def _model(run_dir: Path) -> str:
    import yaml

    config = run_dir / "config.yaml"
    data = yaml.safe_load(config.read_text(encoding="utf-8")) if config.is_file() else {}
    return ((data or {}).get("model") or {}).get("name_or_path", "default")


if __name__ == "__main__":
    main()
