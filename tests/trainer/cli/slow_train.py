"""``flowgrpo`` with every rollout slowed down, for signal tests: a real process, a real CLI.

    python tests/trainer/cli/slow_train.py SECONDS MARKER train --config ... (flowgrpo arguments)

Each call of the policy's sampling appends a line to the file MARKER, then sleeps SECONDS, so a
test that sees a new line knows the process is inside a step and a signal sent now lands in
it. Nothing in the package is changed: the patch is made here only.
"""

from __future__ import annotations

import sys
import time

from flowgrpo.trainer.cli.app import main
from flowgrpo.trainer.loop import step


def slowed(generate, seconds: float, marker: str):
    def slow_generate(*args, **kwargs):
        with open(marker, "a", encoding="utf-8") as handle:
            handle.write(f"sampling {time.monotonic()}\n")
        time.sleep(seconds)
        return generate(*args, **kwargs)

    return slow_generate


if __name__ == "__main__":
    step.generate_rollout = slowed(step.generate_rollout, float(sys.argv[1]), sys.argv[2])
    main(sys.argv[3:], prog_name="flowgrpo")
