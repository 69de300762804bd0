"""How much of a run's diversity reward paid for respelling one workflow.

    python research/diversity_respelling.py runs/default runs/default-s1

Since 2026-12-07 the diversity reward compares :func:`flowgrpo.dsl.canonical.skeleton`, which
writes ``Review ? X : X`` (outside loops) as ``Review -> X``, a loop of a loop as one loop and a
parallel block whose candidates nothing reads as its first branch. Per run directory (its
samples.jsonl): the valid samples, how many of them the skeleton writes otherwise than their
text without instructions (``canonical(w, instructions=False)``, about what diversity compared
before), and the mean diversity of the valid samples under each key (the share of a sample's
group siblings whose key differs, a sibling without a workflow counting as different, as
``rewards.components.diversity`` scores it).
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

from flowgrpo.dsl import canonical, parse
from flowgrpo.dsl.canonical import skeleton
from flowgrpo.trainer.reports.diagnose import read_jsonl


def keys_of(row: dict) -> tuple[str | None, str | None]:
    """(plain key, skeleton) of a samples.jsonl row; (None, None) without a parsed workflow."""
    text = row.get("canonical")
    if not text:
        return None, None
    workflow = parse(text)
    return canonical(workflow, instructions=False), skeleton(workflow)


def _share_different(keys: list, i: int) -> float:
    others = [k for j, k in enumerate(keys) if j != i]
    return sum(1 for k in others if k is None or k != keys[i]) / len(others) if others else 0.0


def respelling(rows: list[dict]) -> dict:
    """``valid``, ``respelt`` (valid samples whose two keys differ), ``plain`` and ``skeleton``
    (the mean diversity of the valid samples under each key) over samples.jsonl ``rows``."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        groups[(row.get("step"), row.get("problem_id"))].append(row)
    valid = respelt = 0
    plain_sum = skeleton_sum = 0.0
    for group in groups.values():
        pairs = [keys_of(r) for r in group]
        plain, skel = [p for p, _ in pairs], [s for _, s in pairs]
        for i, row in enumerate(group):
            if not row.get("valid") or plain[i] is None:
                continue
            valid += 1
            respelt += plain[i] != skel[i]
            plain_sum += _share_different(plain, i)
            skeleton_sum += _share_different(skel, i)
    mean = (lambda total: total / valid) if valid else (lambda total: float("nan"))
    return {"valid": valid, "respelt": respelt, "plain": mean(plain_sum),
            "skeleton": mean(skeleton_sum)}  # fmt: skip


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="run directories (each holds samples.jsonl)")
    args = parser.parse_args(argv)
    print("| run | valid samples | written otherwise by the skeleton | diversity, plain key | "
          "diversity, skeleton |")  # fmt: skip
    print("|---|---|---|---|---|")
    for run in args.runs:
        try:
            rows = read_jsonl(Path(run) / "samples.jsonl")
        except (OSError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(2)
        r = respelling(rows)
        print(f"| {run} | {r['valid']} | {r['respelt']} | {r['plain']:.3f} | {r['skeleton']:.3f} |")


if __name__ == "__main__":
    main()
