"""What the side-by-side benchmarks (bench_step.py, bench_sft.py) share: each implementation runs
in a child process of the same script, so its peak RSS is its own, and hands its result back on
one ``RESULT {json}`` line of its output."""

from __future__ import annotations

import json
import resource
import subprocess
import sys


def peak_rss_gb() -> float:
    """This process's peak resident memory in GB (``ru_maxrss`` is in kB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def report(result: dict) -> None:
    """Print ``result`` with this process's peak RSS as the child's RESULT line."""
    print("RESULT " + json.dumps({**result, "peak_rss_gb": peak_rss_gb()}), flush=True)


def spawn(script: str, impl: str, args: list[str]) -> dict:
    """Run ``script --child IMPL ARGS`` in a fresh process and return its RESULT (a
    RuntimeError with the end of its stderr when it printed none)."""
    done = subprocess.run(
        [sys.executable, script, "--child", impl, *args], capture_output=True, text=True
    )
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{impl} failed:\n{done.stderr[-3000:]}")
