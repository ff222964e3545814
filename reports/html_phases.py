"""The per-phase, memory and collective-ledger sections of the report page (`reports.html`):
the cost model's breakdown, or its error against a measured run, phase by phase; predicted
memory per pipeline stage against the measured peaks; bytes and calls per collective.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from reports.compare import Comparison
from reports.html_cells import error_cell, optional, table_html, td, tr
from reports.ledger import LedgerRow, join_ledgers, timeline_ledger
from reports.svg import (
    MemoryBar,
    format_bytes,
    format_seconds,
    memory_bars_svg,
)
from specs.bundle import PlanBundle
from specs.timeline import Timeline

PHASE_LABELS = {
    "forward": "forward",
    "backward": "backward",
    "recompute": "recompute",
    "tp_exposed": "TP exposed",
    "cp_exposed": "CP exposed",
    "ep_exposed": "EP exposed",
    "pp_exposed": "PP exposed",
    "dp_exposed": "DP exposed",
    "bubble": "bubble (idle)",
    "optimizer": "optimizer",
}
"""Display names of the comparison phases."""


def ranks_text(ranks: Sequence[int], *, noun: bool = False) -> str:
    """``1, 2, 3``; with ``noun``, ``rank 1`` or ``ranks 1, 2, 3``. At most 20 are listed."""
    listed = ", ".join(str(r) for r in ranks[:20]) + (" …" if len(ranks) > 20 else "")
    if not noun:
        return listed
    return f"{'rank' if len(ranks) == 1 else 'ranks'} {listed}"


def _breakdown_table(estimate: Mapping[str, Any]) -> str:
    """The estimate's own phase breakdown (seconds and share of the iteration)."""
    iteration_s = float(estimate["iteration_time_s"])
    rows = [
        tr(
            [
                td(name.replace("_", " ")),
                td(format_seconds(float(seconds))),
                td(f"{float(seconds) / iteration_s:.1%}" if iteration_s else "–"),
            ]
        )
        for name, seconds in (estimate.get("breakdown") or {}).items()
    ]
    if not rows:
        return '<p class="note">The estimate carries no phase breakdown.</p>'
    return table_html(["phase", "seconds", "share of iteration"], rows, "phase-breakdown")


def _error_table(c: Comparison) -> str:
    rows = [
        (PHASE_LABELS.get(p.phase, p.phase), p.predicted_s, p.measured_s, p.error, "")
        for p in c.phases
    ]
    rows.append(
        (
            "iteration",
            c.iteration_time_predicted_s,
            c.iteration_time_measured_s,
            c.iteration_time_error,
            "total",
        )
    )
    cells = [
        tr(
            [
                td(label),
                td(format_seconds(p)),
                td(format_seconds(m)),
                td(format_seconds(p - m)),
                error_cell(error),
            ],
            cls,
        )
        for label, p, m, error, cls in rows
    ]
    headers = ["phase", "predicted", "measured", "difference", "error"]
    return table_html(headers, cells, "phase-errors")


def profiled_steps_note(c: Comparison, metrics: Mapping[str, Any] | None) -> str:
    """Which measured steps the per-phase figures come from and how they compare with the
    median step. The executor profiles the last `Comparison.measured_iterations` of the
    measured steps (`executor.run`); ``metrics["iteration_time_s"]`` lists every measured
    step's seconds."""
    n = c.measured_iterations
    times = [float(v) for v in (metrics or {}).get("iteration_time_s") or ()]
    if len(times) < n:
        return f"Measured phases: {n} profiled step(s)."
    profiled = times[-n:]
    mean_s = sum(profiled) / n
    median_s = statistics.median(times)
    which = f"step {len(times)}" if n == 1 else f"steps {len(times) - n + 1}-{len(times)}"
    deviation = (mean_s - median_s) / median_s if median_s else 0.0
    return (
        f"Measured phases come from the profiled {which} of {len(times)} measured steps "
        f"({format_seconds(mean_s)} per step, {deviation:+.1%} from the median step of "
        f"{format_seconds(median_s)}); the iteration row compares the median step."
    )


def phases_section(
    estimate: Mapping[str, Any], c: Comparison | None, metrics: Mapping[str, Any] | None
) -> str:
    if c is None:
        return (
            '<section id="phases"><h2>Where the time goes (cost-model estimate)</h2>'
            + _breakdown_table(estimate)
            + "</section>"
        )
    return (
        '<section id="phases"><h2>Per-phase error</h2>'
        + _error_table(c)
        + '<p class="note">Seconds per iteration, averaged over the predicted '
        + escape(ranks_text(c.ranks, noun=True))
        + " (one per pipeline stage). "
        + escape(profiled_steps_note(c, metrics))
        + " Exposed communication is time on a lane not hidden behind compute on the same "
        "rank; bubble is the time neither compute nor communication runs.</p>"
        "<details><summary>Cost-model breakdown (analytic estimate)</summary>"
        + _breakdown_table(estimate)
        + "</details></section>"
    )


def _memory_bars(estimate: Mapping[str, Any], c: Comparison | None) -> list[MemoryBar]:
    measured: dict[int, float] = {}
    for row in c.memory if c else ():
        measured[row.stage] = max(measured.get(row.stage, 0.0), row.measured_gib)
    stages = sorted(estimate.get("memory") or (), key=lambda s: int(s["stage"]))
    if not stages:
        peak = float(estimate["peak_memory_gib"])
        return [
            MemoryBar(label="all ranks", parts=(("total", peak),), measured_gib=measured.get(0))
        ]
    bars = []
    for stage in stages:
        parts = stage.get("parts") or {"total": stage["total_gib"]}
        bars.append(
            MemoryBar(
                label=f"stage {int(stage['stage'])}",
                parts=tuple((str(k), float(v)) for k, v in parts.items()),
                measured_gib=measured.get(int(stage["stage"])),
            )
        )
    return bars


def memory_section(estimate: Mapping[str, Any], bundle: PlanBundle, c: Comparison | None) -> str:
    svg = memory_bars_svg(_memory_bars(estimate, c))
    details = ""
    if c is not None and c.memory:
        rows = [
            tr(
                [
                    td(str(m.rank)),
                    td(str(m.stage)),
                    td(f"{m.predicted_gib:.3g} GiB"),
                    td(f"{m.measured_gib:.3g} GiB"),
                    error_cell(m.error),
                ]
            )
            for m in c.memory
        ]
        details = (
            "<details><summary>Peak memory per rank</summary>"
            + table_html(["rank", "stage", "predicted", "measured", "error"], rows, "memory-ranks")
            + "</details>"
        )
    return (
        '<section id="memory"><h2>Memory per pipeline stage</h2>'
        f'<p class="note">Predicted parts stacked (GiB per GPU, {escape(bundle.job.precision)})'
        + ("; grey bar: highest measured peak of the stage's ranks." if c and c.memory else ".")
        + "</p>"
        + svg
        + details
        + "</section>"
    )


def ledger_section(predicted: Timeline, c: Comparison | None) -> str:
    if c is not None:
        rows: Sequence[LedgerRow] = c.ledger
    else:
        ranks = max(1, len({e.rank for e in predicted.events} | set(predicted.ranks_shown)))
        rows = join_ledgers(timeline_ledger(predicted, num_ranks=ranks, num_iterations=1), {})
    headers = [
        "group",
        "operation",
        "predicted bytes",
        "measured bytes",
        "bytes error",
        "predicted calls",
        "measured calls",
    ]
    cells = [
        [
            td(r.group),
            td(r.op.replace("_", " ")),
            td(optional(r.predicted_bytes, format_bytes)),
            td(optional(r.measured_bytes, format_bytes)),
            error_cell(r.bytes_error),
            td(optional(r.predicted_count, whole_calls)),
            td(optional(r.measured_count, whole_calls)),
        ]
        for r in rows
    ]
    # A prediction-only page keeps the predicted columns.
    keep = range(7) if c is not None else (0, 1, 2, 5)
    body = (
        table_html(
            [headers[i] for i in keep],
            [tr([row[i] for i in keep]) for row in cells],
            "ledger",
            text_cols=2,
        )
        if rows
        else '<p class="note">No communication in this plan.</p>'
    )
    return (
        '<section id="collectives"><h2>Collective ledger</h2>'
        + body
        + '<p class="note">Bytes and calls per rank per iteration, averaged over the ranks '
        "(calls rounded to whole calls); – where a side has no such collective or records no "
        "sizes for it.</p></section>"
    )


def whole_calls(count: float) -> str:
    """A per-rank call count as a whole number of calls: ``5.5`` -> ``6``."""
    return f"{round(count):,}"
