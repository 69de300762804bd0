"""research/bench_seed.py: arms' ratios are taken round by round against the first arm."""

from types import SimpleNamespace

from study_loader import REPO, load_study


def _row(wall, cpu, threads):
    run = {"wall_minutes": wall / 60, "cpu_minutes": cpu / 60, "torch_threads": threads}
    return {"wall_s": wall, "cpu_s": cpu, "runs": [run]}


def test_the_report_gives_round_by_round_ratios_to_the_first_arm(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(REPO / "research"))  # bench_seed imports bench_jobs
    bench = load_study("bench_seed")
    results = {
        "this checkout, 2 thread(s)": [_row(100, 200, 2), _row(200, 400, 2)],
        "this checkout, 1 thread(s)": [_row(150, 150, 1), _row(260, 260, 1)],
    }
    args = SimpleNamespace(seed=0, steps=6, eval_n=40, repeats=2, world=["w.yaml"])
    bench.report(args, results)
    out = capsys.readouterr().out.splitlines()
    one_thread = next(line for line in out if line.startswith("this checkout, 1 thread"))
    # round 0: 150/100 = 1.5 wall, 150/200 = 0.75 CPU; round 1: 1.3 and 0.65; medians 1.40, 0.70
    assert "wall 1.40 (min 1.30, max 1.50), CPU 0.70 (min 0.65, max 0.75)" in one_thread
    assert "torch threads [1]" in one_thread
