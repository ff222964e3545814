"""The report page: one self-contained HTML file for a plan, or a plan and its run.

`render_report` is a pure function of its arguments. Every number is computed and formatted
in Python before it reaches the page, and every string that comes from data is escaped;
the page itself has inline CSS and SVG only (no script, no network). Without a measured
timeline it is the prediction-only page ``paraplan plan --out DIR`` writes as
``DIR/plan.html``. MFU follows Megatron-LM's FLOPs count (causal attention halved,
recompute not counted); HFU adds recompute. Errors are ``(predicted - measured) / measured``.

This module lays out the page, its timelines and notes; the other sections are built in
`reports.html_summary`, `reports.html_phases` and `reports.html_run`, their cells and tables
in `reports.html_cells`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from reports.compare import Comparison, compare
from reports.html_phases import ledger_section, memory_section, phases_section, ranks_text
from reports.html_run import candidates_section, failure_section, run_charts_section
from reports.html_summary import summary_section
from reports.run_dir import check_estimate, check_metrics
from reports.svg import (
    KIND_COLORS,
    gantt_svg,
    lanes_used,
    legend_html,
)
from specs.bundle import PlanBundle
from specs.timeline import Timeline, TimelineEvent

MAX_RANKS_DRAWN = 16
"""Gantt charts per page; further ranks are listed, not drawn, to keep the page light."""
_CSS = """
*{box-sizing:border-box}
body{margin:0;background:#f3f4f6;color:#1f2933;font:14px/1.45 system-ui,-apple-system,
"Segoe UI",Roboto,sans-serif}
main{max-width:1240px;margin:0 auto;padding:20px 24px 40px}
h1{font-size:22px;margin:0 0 2px}h2{font-size:17px;margin:0 0 10px}
.sub{color:#52606d;margin:0 0 16px}
section{background:#fff;border:1px solid #e1e4e8;border-radius:8px;padding:16px 18px;
margin:0 0 16px}
.facts{display:grid;grid-template-columns:repeat(4,minmax(0,1fr));gap:10px 18px;margin:0 0 14px}
.facts div{min-width:0}.facts dt{color:#52606d;font-size:12px;text-transform:uppercase;
letter-spacing:.04em}.facts dd{margin:2px 0 0;font-weight:600;overflow-wrap:anywhere}
.summary-grid{display:flex;gap:18px;align-items:flex-start;flex-wrap:wrap}
.summary-grid table{flex:1 1 520px}
.verdict{flex:0 0 220px;border-radius:8px;padding:14px 16px;color:#fff;background:#52606d}
.verdict b{display:block;font-size:22px}.verdict.good{background:#2f855a}
.verdict.warn{background:#b7791f}.verdict.bad{background:#c53030}
table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}
th,td{padding:5px 10px;border-bottom:1px solid #edf0f2;text-align:right;white-space:nowrap}
th{background:#f7f8fa;color:#52606d;font-weight:600;font-size:12px}
th:first-child,td:first-child{text-align:left}
table.text2 th:nth-child(2),table.text2 td:nth-child(2){text-align:left}
tr.total td{font-weight:700;border-top:2px solid #d5d9de}
tr.winner td{background:#f0fff4}
td.good{color:#2f855a}td.warn{color:#b7791f}td.bad{color:#c53030;font-weight:600}
.scroll{overflow-x:auto}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;margin:0 0 8px;font-size:12px;color:#52606d}
.swatch{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:5px;
vertical-align:-1px}
figure.gantt{margin:0 0 6px}
.note{color:#52606d;font-size:12px;margin:6px 0 0}
section.failure{border-color:#c53030;border-left-width:6px}
.failure .cause{font-weight:700;color:#c53030;overflow-wrap:anywhere}
.two{display:grid;grid-template-columns:1fr 1fr;gap:16px;margin:0 0 16px}
.two section{margin:0}
details summary{cursor:pointer;color:#52606d;margin:8px 0}
pre.why{white-space:pre-wrap;background:#f7f8fa;border-radius:6px;padding:10px 12px;margin:0 0 10px;
font:13px/1.5 system-ui,sans-serif}
@media (max-width:900px){.facts{grid-template-columns:repeat(2,1fr)}.two{grid-template-columns:1fr}}
"""


def render_report(
    bundle: PlanBundle,
    estimate: Mapping[str, Any],
    predicted: Timeline,
    measured: Timeline | None = None,
    metrics: Mapping[str, Any] | None = None,
    comparison: Comparison | None = None,
    candidates: Mapping[str, Any] | Sequence[Any] | None = None,
    host_probe_reference_s: float | None = None,
) -> str:
    """The whole report page as one HTML string.

    With ``measured`` the page compares prediction and measurement (``comparison`` is
    computed when not given); without it the page shows the prediction alone. ``estimate``
    and ``metrics`` are the JSON objects of a run folder (`reports.run_dir`); a missing key
    the page needs raises `SpecError`. ``host_probe_reference_s`` is the host probe of the
    profile the prediction used (`profiles.lookup.host_probe_s`): with a run that probed the
    host (``metrics.json`` ``host_probe_p50_s``), the summary shows how fast the host ran
    during the run against while it was profiled.
    """
    check_estimate(estimate, where="render_report estimate")
    if metrics is not None:
        check_metrics(metrics, where="render_report metrics")
    if measured is not None and comparison is None:
        comparison = compare(
            predicted, measured, plan=bundle.plan, estimate=estimate, metrics=metrics
        )
    title = f"{bundle.model.name} · {bundle.plan.label()} · {bundle.cluster.num_gpus}× " + (
        bundle.cluster.hardware
    )
    kind = "predicted vs measured" if measured is not None else "prediction"
    failed = metrics is not None and metrics.get("status") == "failed"
    if failed:
        kind += " · the run failed"
    sections = [
        failure_section(metrics) if failed and metrics is not None else "",
        summary_section(bundle, estimate, metrics, comparison, host_probe_reference_s),
        _timelines(predicted, measured, comparison),
        phases_section(estimate, comparison, metrics),
        memory_section(estimate, bundle, comparison),
        ledger_section(predicted, comparison),
    ]
    if metrics is not None:
        sections.append(run_charts_section(metrics, comparison))
    if candidates is not None:
        sections.append(candidates_section(candidates))
    sections.append(_notes(predicted, measured))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>paraplan · {escape(title)}</title><style>{_CSS}</style></head><body><main>"
        f"<h1>paraplan report: {escape(bundle.model.name)}</h1>"
        f'<p class="sub">{escape(kind)} · {escape(title)}</p>'
        + "".join(sections)
        + "</main></body></html>\n"
    )


# ---- timelines -----------------------------------------------------------------------


def _timelines(predicted: Timeline, measured: Timeline | None, c: Comparison | None) -> str:
    ranks_p = sorted({e.rank for e in predicted.events} | set(predicted.ranks_shown))
    ranks = list(c.ranks) if c is not None else ranks_p
    drawn = ranks[:MAX_RANKS_DRAWN]
    per_rank: dict[int, list[tuple[str, tuple[TimelineEvent, ...], float]]] = {}
    for rank in drawn:
        sides = [("predicted", predicted.for_rank(rank), predicted.iteration_time_s)]
        if measured is not None:
            sides.append(("measured", measured.for_rank(rank), measured.iteration_time_s))
        per_rank[rank] = sides
    events = [e for sides in per_rank.values() for _, evs, _ in sides for e in evs]
    lanes = lanes_used(events)
    axis_end_s = max(
        [e.end_s for e in events]
        + [predicted.iteration_time_s, measured.iteration_time_s if measured else 0.0]
    )
    kinds = [k for k in KIND_COLORS if any(e.kind == k for e in events)]
    figures = []
    for rank, sides in per_rank.items():
        names = " ".join(label for label, _, _ in sides)
        svg = gantt_svg(rank=rank, sides=sides, axis_end_s=axis_end_s, lanes=lanes)
        figures.append(
            f'<figure class="gantt" data-rank="{rank}" data-sides="{names}">{svg}</figure>'
        )
    notes = []
    if len(ranks) > len(drawn):
        notes.append(
            f"{len(ranks) - len(drawn)} more ranks not drawn: {ranks_text(ranks[len(drawn) :])}."
        )
    if measured is not None and c is not None:
        only = sorted(
            ({e.rank for e in measured.events} | set(measured.ranks_shown)) - set(c.ranks)
        )
        if only:
            notes.append(
                f"Measured only: {ranks_text(only, noun=True)}. The prediction draws one rank "
                "per pipeline stage (tp, cp and dp index 0); the other ranks of a stage do the "
                "same work."
            )
    header = (
        "Predicted above measured on one time axis; dashed lines mark each side's iteration "
        "time. Hover a bar for its name, microbatch, duration and bytes."
        if measured is not None
        else "Predicted timeline. Hover a bar for its name, microbatch, duration and bytes."
    )
    note_html = "".join(f'<p class="note">{escape(n)}</p>' for n in notes)
    return (
        '<section id="timelines"><h2>Per-rank timelines</h2>'
        f'<p class="note">{escape(header)}</p>'
        + legend_html(kinds)
        + "".join(figures)
        + note_html
        + "</section>"
    )


def _notes(predicted: Timeline, measured: Timeline | None) -> str:
    notes = [
        "MFU counts model FLOPs as Megatron-LM does (causal attention halved, recompute not "
        "counted); HFU adds the recomputed FLOPs.",
        "Errors are (predicted − measured) / measured: positive means the model predicted "
        "too much.",
    ]
    for label, timeline in (("Predicted", predicted), ("Measured", measured)):
        if timeline is not None and timeline.note:
            notes.append(f"{label} timeline: {timeline.note}")
    items = "".join(f"<li>{escape(n)}</li>" for n in notes)
    return f'<section id="notes"><h2>Notes</h2><ul class="note">{items}</ul></section>'
