"""The production path on a GPU, every measurement in one process: ``python scripts/gpu_check.py
--out DIR`` writes ``DIR/gpu_check.md`` and ``DIR/gpu_check.json`` (rewritten after each part,
so a run cut short keeps what it measured).

Models are randomly initialised ones of real architectures (``random:qwen2.5-7b`` and smaller
shapes, :mod:`flowgrpo.operators.random_models`): no weights can be downloaded on the device.
The executor is the SIMULATED one (accuracies from a model of operators, not from an LLM), so
rewards vary and updates happen. Parts (``--parts``, each can run alone, in this order):

* ``train``: the shipped 7B setting (configs/qwen2.5-7b.yaml: bf16, LoRA r32 on every projection,
  K=16 x 8 problems, 64 new tokens, gradient checkpointing), one warm-up step and ``steps``
  timed ones: generation / scoring / forward+backward / optimizer seconds, peak GPU memory
  (allocated and reserved) against ``flowgrpo train --dry-run``'s estimate.
* ``exact``: bf16 on the device: shared-prefix log-probs against the full forward, merged-weight
  sampling restoring the base weights bit for bit, gradient checkpointing on against off.
* ``eval``: ``flowgrpo eval`` of the adapter the train part saved.
* ``generate``: decode tokens/s against the memory-bandwidth limit (weights read once per step).
* ``capacity``: the largest generation batch (K x problems) and training group K that fit.
* ``trl``: flowgrpo against TRL's GRPOTrainer (scripts/bench_step.py's setting) on the
  SmolLM2-135M and Qwen2.5-1.5B shapes: seconds per step, peak memory. Needs ``trl``.
* ``compile``: HF ``generate`` with a static cache and ``torch.compile`` (compiles first).

``--profile tiny`` runs the same code on a CPU at a tiny shape in seconds (the CI test).

    python scripts/gpu_check.py --out gpu-out                   # on the GPU machine
    python scripts/gpu_check.py --out /tmp/g --profile tiny      # the same path on a CPU
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import statistics
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

from gpu_common import PROFILES, Profile, cuda, device_info, release

from flowgrpo.files import replace_text

PARTS = ("train", "exact", "eval", "generate", "capacity", "trl", "compile")


def part_trl(profile: Profile, out: Path) -> dict:
    """bench_step.py's side-by-side (K=8 of one prompt, 32 new tokens, LoRA r16 on q/k/v/o,
    validity reward, no executor), each run in its own process, on the device."""
    if importlib.util.find_spec("trl") is None:
        raise RuntimeError("trl is not installed: pip install trl (the side-by-side needs it)")
    import bench_step  # scripts/ is on sys.path when this script runs

    where = {"device": profile.device, "dtype": "bfloat16" if cuda() else "float32"}
    rows = []
    for model in profile.trl_models:
        for impl in ("ours", "trl"):
            try:
                run = bench_step._spawn(impl, profile.trl_steps, {"model": model, **where})
            except RuntimeError as exc:
                rows.append({"model": model, "impl": impl, "error": str(exc)[-600:]})
                continue
            times = run["step_times"][1:] or run["step_times"]
            median = round(statistics.median(times), 3)
            rows.append({"model": model, "impl": impl, "median_step_s": median,
                         "steps_timed": len(times), **_peaks(run)})  # fmt: skip
    summary = {}
    for model in profile.trl_models:
        pair = {r["impl"]: r for r in rows if r["model"] == model and "median_step_s" in r}
        if len(pair) == 2:
            summary[f"{model} ours/trl step time"] = round(
                pair["ours"]["median_step_s"] / pair["trl"]["median_step_s"], 2
            )
    return {"rows": rows, "summary": summary}


def _peaks(run: dict) -> dict:
    keys = ("peak_cuda_allocated_gib", "peak_cuda_reserved_gib", "peak_rss_gb")
    return {k: round(run[k], 2) for k in keys if k in run}


def _part(name: str):
    import gpu_exact
    import gpu_train

    return {
        "train": gpu_train.part_train,
        "exact": gpu_exact.part_exact,
        "eval": gpu_train.part_eval,
        "generate": gpu_exact.part_generate,
        "capacity": gpu_train.part_capacity,
        "trl": part_trl,
        "compile": gpu_exact.part_compile,
    }[name]


def markdown(report: dict) -> str:
    """The report as Markdown: the machine, then one table per part."""
    lines = [f"# gpu_check ({report['profile']}), {report['date']}", ""]
    lines += [f"- {k}: {v}" for k, v in report["machine"].items()]
    lines.append(f"- command: `{report['command']}`")
    for name, part in report["parts"].items():
        lines += ["", f"## {name} ({part.get('seconds', '?')} s)", ""]
        if "error" in part:
            lines += ["failed:", "", "```", part["error"], "```"]
            continue
        lines += _table(part.get("rows", []))
        lines += [""] + [f"- {k}: {v}" for k, v in part.get("summary", {}).items()]
        lines += [f"- note: {n}" for n in part.get("notes", [])]
    return "\n".join(lines) + "\n"


def _table(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    keys = list(dict.fromkeys(k for r in rows for k in r))
    out = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    out += ["| " + " | ".join(_cell(r.get(k, "")) for k in keys) + " |" for r in rows]
    return out


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "/")


def run(profile: Profile, parts: list[str], out: Path, work: Path) -> dict:
    """Run ``parts`` in order (their runs and checkpoints under ``work``); each failure is
    recorded and the next part still runs."""
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    date = datetime.now(timezone.utc).isoformat(timespec="seconds")
    report = {"profile": profile.name, "date": date, "machine": device_info(),
              "command": " ".join(sys.argv), "parts": {}}  # fmt: skip
    for name in parts:
        print(f"[gpu_check] {name} ...", flush=True)
        start = time.perf_counter()
        try:
            result = _part(name)(profile, work)
        except Exception:  # one part's failure is a result; the rest still run
            result = {"error": traceback.format_exc()[-3000:]}
        release()
        result["seconds"] = round(time.perf_counter() - start, 1)
        report["parts"][name] = result
        # replaced whole, and a link there replaced rather than written through
        replace_text(out / "gpu_check.json", json.dumps(report, indent=1, default=str))
        replace_text(out / "gpu_check.md", markdown(report))
        print(f"[gpu_check] {name}: {'FAILED' if 'error' in result else 'ok'} in "
              f"{result['seconds']} s", flush=True)  # fmt: skip
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="folder for the tables")
    parser.add_argument(
        "--work",
        type=Path,
        help="folder for the runs' checkpoints "
        "(default: OUT/work; large: keep it out of a folder you copy back)",
    )
    parser.add_argument("--profile", choices=sorted(PROFILES), default="gpu")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"comma-separated, from {','.join(PARTS)}")  # fmt: skip
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS]
    if unknown or not parts:
        parser.error(f"unknown parts {unknown or args.parts!r}; choose from {', '.join(PARTS)}")
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"--out {args.out} is a file: give a folder for the tables")
    profile = PROFILES[args.profile]
    if profile.device == "cuda" and not cuda():
        parser.error("no CUDA device: run --profile tiny on a CPU")
    logging.basicConfig(level=logging.WARNING)
    report = run(profile, parts, args.out, args.work or args.out / "work")
    failed = [n for n, p in report["parts"].items() if "error" in p]
    print(f"[gpu_check] wrote {args.out / 'gpu_check.md'}; failed parts: {failed or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
