"""The report page: one self-contained HTML file for a plan, or a plan and its run.

`render_report` is a pure function of its arguments. Every number is computed and formatted
in Python before it reaches the page, and every string that comes from data is escaped;
the page itself has inline CSS and SVG only (no script, no network). Without a measured
timeline it is the prediction-only page ``paraplan plan --out DIR`` writes as
``DIR/plan.html``. MFU follows Megatron-LM's FLOPs count (causal attention halved,
recompute not counted); HFU adds recompute. Errors are ``(predicted - measured) / measured``.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from reports.compare import Comparison, compare
from reports.html_cells import error_cell, number, optional, table_html, td, tr
from reports.html_summary import summary_section
from reports.ledger import LedgerRow, join_ledgers, timeline_ledger
from reports.run_dir import check_estimate, check_metrics
from reports.svg import (
    KIND_COLORS,
    MemoryBar,
    format_bytes,
    format_seconds,
    gantt_svg,
    iteration_times_svg,
    lanes_used,
    legend_html,
    line_chart_svg,
    memory_bars_svg,
)
from specs.bundle import PlanBundle
from specs.errors import SpecError
from specs.formats import percent
from specs.timeline import Timeline, TimelineEvent

MAX_RANKS_DRAWN = 16
"""Gantt charts per page; further ranks are listed, not drawn, to keep the page light."""
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
        _phases(estimate, comparison, metrics),
        _memory(estimate, bundle, comparison),
        _ledger(predicted, comparison),
    ]
    if metrics is not None:
        sections.append(_run_charts(metrics, comparison))
    if candidates is not None:
        sections.append(_candidates(candidates))
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
            f"{len(ranks) - len(drawn)} more ranks not drawn: {_ranks_text(ranks[len(drawn) :])}."
        )
    if measured is not None and c is not None:
        only = sorted(
            ({e.rank for e in measured.events} | set(measured.ranks_shown)) - set(c.ranks)
        )
        if only:
            notes.append(
                f"Measured only: {_ranks_text(only, noun=True)}. The prediction draws one rank "
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


def _ranks_text(ranks: Sequence[int], *, noun: bool = False) -> str:
    """``1, 2, 3``; with ``noun``, ``rank 1`` or ``ranks 1, 2, 3``. At most 20 are listed."""
    listed = ", ".join(str(r) for r in ranks[:20]) + (" …" if len(ranks) > 20 else "")
    if not noun:
        return listed
    return f"{'rank' if len(ranks) == 1 else 'ranks'} {listed}"


# ---- phases, memory, collectives -----------------------------------------------------


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


def _phases(
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
        + escape(_ranks_text(c.ranks, noun=True))
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


def _memory(estimate: Mapping[str, Any], bundle: PlanBundle, c: Comparison | None) -> str:
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


def _ledger(predicted: Timeline, c: Comparison | None) -> str:
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


# ---- run charts, candidates, notes ---------------------------------------------------


def failure_section(metrics: Mapping[str, Any]) -> str:
    """The failure of a failed run (``metrics.json`` ``status`` ``failed``,
    `executor.run_folder` module doc): the cause, the other ranks, what ran."""
    failure = metrics.get("failure") or {}
    context = "".join(f"<li>{escape(str(line))}</li>" for line in failure.get("context") or ())
    steps = metrics.get("steps") or []
    ran = (
        f"{len(steps)} measured steps ran (steps {steps[0]}-{steps[-1]})"
        if steps
        else "no measured step finished"
    )
    return (
        '<section id="run-failure" class="failure"><h2>The run failed</h2>'
        f'<p class="cause">{escape(str(failure.get("cause", "cause not recorded")))}</p>'
        + (f"<ul>{context}</ul>" if context else "")
        + f'<p class="note">{escape(ran)}; the figures below cover them. Every rank\'s '
        f"traceback is in {escape(str(failure.get('log', 'failure.log')))}.</p></section>"
    )


def _run_charts(metrics: Mapping[str, Any], c: Comparison | None) -> str:
    loss = [float(v) for v in metrics.get("loss") or ()]
    times = [float(v) for v in metrics.get("iteration_time_s") or ()]
    loss_html = (
        line_chart_svg(loss, y_label="loss") if loss else '<p class="note">No loss recorded.</p>'
    )
    markers: list[tuple[str, float]] = []
    if metrics.get("iteration_time_p50_s") is not None:
        markers.append(("median", float(metrics["iteration_time_p50_s"])))
    if c is not None:
        markers.append(("predicted", c.iteration_time_predicted_s))
    if "iteration_time_p95_s" in metrics:
        markers.append(("p95", float(metrics["iteration_time_p95_s"])))
    times_html = (
        iteration_times_svg(times, lines=markers)
        if times
        else '<p class="note">No iteration times recorded.</p>'
    )
    return (
        '<div class="two"><section id="loss"><h2>Loss</h2>'
        + loss_html
        + '</section><section id="iteration-times"><h2>Iteration time per step</h2>'
        + times_html
        + f'<p class="note">{len(times)} measured steps; the distribution is summed up by '
        "the median and p95 lines, against the predicted iteration time.</p></section></div>"
    )


CANDIDATE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("plan", "label"),
    ("iteration (s)", "iteration_time_s"),
    ("tokens/s", "tokens_per_s"),
    ("MFU", "mfu"),
    ("peak memory (GiB)", "peak_memory_gib"),
    ("fits", "fits"),
)
"""(header, key) of the candidates table: keys of one entry of candidates.json's ``plans``
(`paraplan plan --out DIR`: the plan's fields and ``label`` with the keys of
`costmodel.estimate.estimate_to_json`)."""


def _value(value: Any, key: str = "") -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if key == "mfu" and isinstance(value, int | float):
        return percent(value)
    if isinstance(value, float):
        return number(value)
    if isinstance(value, list | tuple):
        return ", ".join(_value(v) for v in value)
    return str(value)


def _candidates(candidates: Mapping[str, Any] | Sequence[Any]) -> str:
    """The candidates section from candidates.json (``{"plans": [...], "explanation": ...}``)
    or from its list of plans."""
    if isinstance(candidates, Mapping):
        rows = candidates.get("plans", [])
        explanation = str(candidates.get("explanation", ""))
    elif isinstance(candidates, Sequence) and not isinstance(candidates, str):
        rows, explanation = candidates, ""
    else:
        raise SpecError(
            "candidates must be an object with 'plans' and 'explanation' (candidates.json of "
            f"`paraplan plan --out`) or a list of plans, got {type(candidates).__name__}"
        )
    if not all(isinstance(r, Mapping) for r in rows):
        raise SpecError("each entry of candidates 'plans' must be an object (a plan entry)")
    table = table_html(
        [header for header, _ in CANDIDATE_COLUMNS],
        [
            tr([td(_value(r.get(k), k)) for _, k in CANDIDATE_COLUMNS], "winner" if i == 0 else "")
            for i, r in enumerate(rows)
        ],
        "candidates",
    )
    why = f'<pre class="why">{escape(explanation)}</pre>' if explanation else ""
    return (
        '<section id="candidates-section"><h2>Top candidates and why the winner was chosen</h2>'
        + why
        + table
        + '<p class="note">The first row (highlighted) is the chosen plan; MFU counts model '
        "FLOPs.</p></section>"
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
