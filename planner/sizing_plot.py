"""The scaling plot of a cluster sizing (`planner.sizing.size_cluster`): training days and MFU
against the GPU count, the chosen size marked.
"""

from __future__ import annotations

from pathlib import Path

from planner.sizing import SizingResult


def scaling_plot(result: SizingResult, path: str | Path) -> Path:
    """Save days and MFU against GPUs (log2 x axis) as an image; returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result.rows if r.best is not None]
    fig, days_ax = plt.subplots(figsize=(7, 4))
    gpus = [r.num_gpus for r in rows]
    days_ax.plot(gpus, [r.days for r in rows], "o-", color="tab:blue", label="days")
    days_ax.set_xscale("log", base=2)
    days_ax.set_xlabel("GPUs")
    days_ax.set_ylabel("training days", color="tab:blue")
    mfu_ax = days_ax.twinx()
    mfu_ax.plot(gpus, [100 * r.mfu for r in rows], "s--", color="tab:red", label="MFU")
    mfu_ax.set_ylabel("MFU (%)", color="tab:red")
    if result.chosen is not None:
        days_ax.axvline(result.chosen.num_gpus, color="grey", linestyle=":")
    days_ax.set_title(result.goal)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
