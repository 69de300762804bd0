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


def test_a_variant_arm_adds_its_override_after_the_common_ones(monkeypatch, tmp_path):
    """``--variant O``: the arm's study command carries ``--set O`` after every ``--set``."""
    monkeypatch.syspath_prepend(str(REPO / "research"))
    jobs = load_study("bench_jobs")
    seen = []

    def fake_run(cmd, **kwargs):
        seen.append(cmd)
        (tmp_path / "known_optimum-t.json").write_text('{"worlds": {}}')
        return SimpleNamespace(returncode=0, stderr="")

    monkeypatch.setattr(jobs.subprocess, "run", fake_run)
    args = SimpleNamespace(config="c.yaml", eval_n=8, steps=2, seeds=[0], world=[],
                           overrides=["optim.lr=1e-4"])  # fmt: skip
    jobs.study(args, 1, tmp_path, "t", extra=["rollout.spare_problems=2"])
    sets = [seen[0][i + 1] for i, part in enumerate(seen[0]) if part == "--set"]
    assert sets == ["optim.lr=1e-4", "rollout.spare_problems=2"]
