"""The tools' arguments are checked before any work: a count of 0 is a usage error (it crashed
in statistics at the end, or after a warm-up study), and --help only helps."""

from __future__ import annotations

import subprocess
import sys

import pytest
from script_loader import REPO


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


@pytest.mark.parametrize(
    ("script", "argv", "says"),
    [("scripts/bench_dsl.py", ["--repeats", "0"], "--repeats must be >= 1, got 0"),
     ("scripts/bench_rewards.py", ["--repeats", "0"], "--repeats must be >= 1, got 0"),
     ("scripts/bench_sampler.py", ["--rounds", "0"], "--rounds must be >= 1, got 0"),
     ("scripts/bench_sampler.py", ["--rows", "8", "0"], "--rows must be >= 1"),
     ("research/bench_jobs.py", ["--repeats", "0"], "--repeats must be >= 1, got 0"),
     ("research/bench_seed.py", ["--eval-n", "0"], "--eval-n must be >= 1, got 0"),
     ("research/bench_seed.py", ["--threads", "2", "0"], "--threads must be >= 1")],
)  # fmt: skip
def test_a_count_below_one_is_a_usage_error(script, argv, says):
    done = _run(script, *argv)
    assert done.returncode == 2 and says in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize("script", ["scripts/metrics_table.py", "scripts/bench_grammar_budget.py"])
def test_help_only_helps(script):
    """metrics_table.py --help rewrote docs/METRICS_TABLE.md; bench_grammar_budget ran."""
    table = REPO / "docs" / "METRICS_TABLE.md"
    before = table.stat().st_mtime_ns
    done = _run(script, "--help")
    assert done.returncode == 0 and done.stdout.startswith("usage:")
    assert "| grammar |" not in done.stdout and table.stat().st_mtime_ns == before
