"""scripts/sandbox_leftovers.py: its report counts what hostile runs leave (nothing, today)."""

from __future__ import annotations

import json
import sys

import pytest
from script_loader import load_script

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


def test_two_runs_of_each_program_are_answered_and_leave_nothing(capsys):
    script = load_script("sandbox_leftovers")
    assert script.main(["--runs", "2"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["answered"] == {"nested": 2, "sysv": 2}
    assert report["folders_left"] == 0 and report["bytes_left"] == 0
    assert report["sysv_objects_after"] <= report["sysv_objects_before"]
