"""The sections of the report page (`reports.html`) that come from a measured run or a
search: the failure of a failed run, the loss and iteration-time charts, and the table of
top candidates from ``paraplan plan``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from reports.compare import Comparison
from reports.html_cells import number, table_html, td, tr
from reports.svg import (
    iteration_times_svg,
    line_chart_svg,
)
from specs.errors import SpecError
from specs.formats import mfu_text


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


def run_charts_section(metrics: Mapping[str, Any], c: Comparison | None) -> str:
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


def _value(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return number(value)
    if isinstance(value, list | tuple):
        return ", ".join(_value(v) for v in value)
    return str(value)


def _candidate_cell(entry: Mapping[str, Any], key: str) -> str:
    """One cell of the candidates table; MFU as `specs.formats.mfu_text` writes it (over the
    bf16 peak too for a job of another GEMM dtype; entries without ``mfu_peak_dtype``, written
    before it existed, read as bf16)."""
    mfu = entry.get("mfu")
    if key == "mfu" and isinstance(mfu, int | float):
        return mfu_text(mfu, str(entry.get("mfu_peak_dtype", "bf16")), entry.get("mfu_bf16"))
    return _value(entry.get(key))


def candidates_section(candidates: Mapping[str, Any] | Sequence[Any]) -> str:
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
            tr(
                [td(_candidate_cell(r, k)) for _, k in CANDIDATE_COLUMNS],
                "winner" if i == 0 else "",
            )
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
