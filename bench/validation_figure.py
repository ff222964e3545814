"""docs/validation.png from the published-runs validation's outcomes
(`bench/validate_published.py --figure`): predicted against published seconds per iteration,
plotting only, no computation of figures.

`COLOURS` gives each GPU generation of the summaries (`validation_stats.Outcome.generation`)
its marker colour; `write_figure` draws the rows on log axes with the identity line and the
±10% band.
"""

from __future__ import annotations

from pathlib import Path

from validation_stats import Outcome

COLOURS = {"A100": "tab:blue", "H100/H800": "tab:green", "Blackwell": "tab:red"}
"""Marker colour per GPU generation in the figure."""


def write_figure(outcomes: list[Outcome], path: Path) -> None:
    """Predicted vs published seconds per iteration, log axes, one colour per GPU
    generation, the identity line and the ±10% band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 6))
    for generation, colour in COLOURS.items():
        rows = [o for o in outcomes if o.generation == generation]
        if rows:
            ax.scatter(
                [o.published_s for o in rows],
                [o.predicted_s for o in rows],
                s=18,
                color=colour,
                label=f"{generation} ({len(rows)})",
            )
    values = [o.published_s for o in outcomes] + [o.predicted_s for o in outcomes]
    low, high = min(values) / 1.5, max(values) * 1.5
    ax.plot([low, high], [low, high], color="black", linewidth=0.8)
    ax.fill_between(
        [low, high],
        [low * 0.9, high * 0.9],
        [low * 1.1, high * 1.1],
        color="grey",
        alpha=0.25,
        label="±10%",
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.set_xlabel("published seconds per iteration")
    ax.set_ylabel("predicted seconds per iteration (estimate_plan)")
    ax.set_title("paraplan vs published Megatron runs")
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
