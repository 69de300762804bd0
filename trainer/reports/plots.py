"""The plots of ``flowgrpo diagnose`` (:func:`plot_run`) and the helpers ``analyze`` shares.

Figures are drawn on the Agg canvas directly (``matplotlib.figure.Figure``), so the global
pyplot backend and state are never touched and no display is needed. matplotlib is imported
inside the functions; without it a clear error says how to install it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from flowgrpo.files import PNG_MARK, png_marked
from flowgrpo.trainer.monitoring.collapse import replay

PLOTS_DIR = "plots"


def new_figure(width: float = 7.0, height: float = 3.6):
    """A (figure, axes) pair on an Agg canvas."""
    try:
        # optional: matplotlib (only plots need it; reports work without)
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - matplotlib is installed in tests
        raise ImportError(
            "plots need matplotlib: pip install matplotlib (or run without plots)"
        ) from exc
    figure = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(figure)
    return figure, figure.add_subplot(1, 1, 1)


def check_replaceable(path: Path) -> None:
    """A ``FileExistsError`` when something stands at ``path`` that a plot may not replace:
    anything but a PNG flowgrpo wrote (:func:`flowgrpo.files.png_marked`): a user's file of the
    same name, a link, a folder, or a plot of a flowgrpo older than the mark."""
    if (path.exists() or path.is_symlink()) and not png_marked(path):
        raise FileExistsError(
            f"{path} exists and carries no '{PNG_MARK}' PNG mark (a file of yours, or a plot of "
            "a flowgrpo from before the mark), so it is not replaced: move it or delete it"
        )


def save(figure, path: str | Path, dpi: float | None = None) -> Path:
    """Write ``figure`` as PNG to ``path`` (parent folders created; ``dpi``: the figure's own
    when None), marked as flowgrpo's, so a later command replaces or deletes it and nothing
    else (:func:`check_replaceable`)."""
    path = Path(path)
    check_replaceable(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, format="png", dpi=dpi, metadata={PNG_MARK: "plot"})
    return path


def series(history: Sequence[Mapping], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of ``key``: lines without a finite number for it are left out."""
    steps, values = [], []
    for index, line in enumerate(history):
        value = line.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if not math.isfinite(value):
            continue
        step = line.get("step", index)
        steps.append(step if isinstance(step, (int, float)) else index)
        values.append(float(value))
    return steps, values


def seed_panels(
    runs: Sequence[Mapping[str, Sequence[float]]],
    labels: Mapping[str, str],
    path: Path,
) -> Path:
    """One panel per key of ``labels`` (its y label): every seed's series over steps, faint,
    and the mean over seeds, bold (the steps all seeds reached). ``runs``: key -> values."""
    figure = new_figure(5.0 * len(labels), 4.0)[0]
    figure.clear()
    for index, (key, label) in enumerate(labels.items(), start=1):
        ax = figure.add_subplot(1, len(labels), index)
        width = min(len(run[key]) for run in runs)
        steps = range(1, width + 1)
        for run in runs:
            ax.plot(steps, run[key][:width], alpha=0.3, lw=1)
        mean = [math.fsum(run[key][i] for run in runs) / len(runs) for i in range(width)]
        ax.plot(steps, mean, color="black", lw=2, label="mean over seeds")
        ax.set_xlabel("step")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend()
    return save(figure, path)


def bar_chart(labels: Sequence[str], values: Sequence[float], title: str, xlabel: str, path: Path):
    """A horizontal bar chart (first label on top) written to ``path``; None when empty."""
    if not labels:
        return None
    short = [label if len(label) <= 60 else label[:57] + "..." for label in labels]
    figure, axes = new_figure(8.0, max(2.0, 0.4 * len(labels) + 1.2))
    positions = list(range(len(labels)))
    axes.barh(positions, list(values), color="tab:blue")
    axes.set_yticks(positions)
    axes.set_yticklabels(short, fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel(xlabel)
    axes.set_title(title)
    return save(figure, path)


def plot_run(
    run_dir: str | Path,
    history: Sequence[Mapping],
    *,
    entropy_min: float = 0.1,
    collapse_steps: Sequence[int] | None = None,
) -> list[Path]:
    """Write PNG plots of ``history`` into RUN_DIR/plots/; return the files written.

    Plots: reward.png (reward and each rewards/<component>/mean), entropy.png (with the
    ``entropy_min`` line), frac_reward_zero_std.png, fallback_validity.png (collapse events
    as red lines: ``collapse_steps``, or recomputed with the default thresholds when None;
    rollbacks as green lines), grad_norm.png, completion_length.png (mean, min-max band),
    cov_logp_adv.png. A plot whose keys were never logged is skipped, not an error.
    """
    out_dir = Path(run_dir) / PLOTS_DIR
    if collapse_steps is None:
        collapse_steps = [e.step for e in replay(history).events]
    rollback_steps = [line.get("step", i) for i, line in enumerate(history) if line.get("rollback")]
    components = sorted(
        {k for line in history for k in line if k.startswith("rewards/") and k.endswith("/mean")}
    )
    simple = [
        ("reward.png", "reward", ["reward", *components], None),
        ("entropy.png", "entropy (nats)", ["entropy"], entropy_min),
        (
            "frac_reward_zero_std.png",
            "share of groups with reward std 0",
            ["frac_reward_zero_std"],
            None,
        ),
        ("grad_norm.png", "grad norm", ["grad_norm"], None),
        ("cov_logp_adv.png", "Cov(log pi, A)", ["cov_logp_adv"], 0.0),
    ]
    written = []
    for name, title, keys, hline in simple:
        path = _line_plot(history, keys, title, out_dir / name, hline=hline)
        if path:
            written.append(path)
    path = _line_plot(
        history,
        ["fallback_rate", "validity_rate"],
        "fallback and validity rates (red: update -> collapse, green: rollback)",
        out_dir / "fallback_validity.png",
        vlines=[(rollback_steps, "tab:green", 3.0), (collapse_steps, "tab:red", 1.0)],
    )
    if path:
        written.append(path)
    path = _length_plot(history, out_dir / "completion_length.png")
    if path:
        written.append(path)
    return written


def _line_plot(history, keys, title, path, *, hline=None, vlines=()):
    drawn = [(key, *series(history, key)) for key in keys]
    drawn = [(key, xs, ys) for key, xs, ys in drawn if xs]
    if not drawn:
        return None
    figure, axes = new_figure()
    for key, xs, ys in drawn:
        axes.plot(xs, ys, label=key, marker="." if len(xs) < 50 else None)
    if hline is not None:
        axes.axhline(hline, color="gray", linestyle="--", linewidth=1)
    for steps, color, width in vlines:
        if steps:  # one collection per kind: thousands of axvline calls are slow
            axes.vlines(
                list(steps),
                0,
                1,
                transform=axes.get_xaxis_transform(),
                colors=color,
                linestyles=":",
                linewidths=width,
            )
    axes.set_xlabel("step")
    axes.set_title(title)
    if len(drawn) > 1:
        axes.legend(fontsize=8)
    return save(figure, path)


def _length_plot(history, path):
    xs, mean = series(history, "completions/mean_length")
    if not xs:
        return None
    figure, axes = new_figure()
    axes.plot(xs, mean, label="mean")
    lo_x, lo = series(history, "completions/min_length")
    hi_x, hi = series(history, "completions/max_length")
    if lo_x and lo_x == hi_x:
        axes.fill_between(lo_x, lo, hi, alpha=0.25, label="min-max")
        axes.legend(fontsize=8)
    axes.set_xlabel("step")
    axes.set_title("completion length (tokens)")
    return save(figure, path)
