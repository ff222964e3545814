"""Hand-written SVG charts for the report: per-rank Gantt, memory bars, loss, iteration times.

Every function returns one ``<svg>`` element as a string, self-contained (colours inline,
no script, no external font), scaled to its container through ``viewBox``. Every text that
comes from data is escaped. Times are seconds in, shown as ms (or s / µs when that reads
better); memory is GiB. Hover text is the SVG ``<title>`` of each mark.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from specs.timeline import LANES, TimelineEvent

WIDTH = 1100
"""viewBox width of full-width charts, in user units (the page scales it to its column)."""
HALF_WIDTH = 560
"""viewBox width of the charts shown two to a row, so their text keeps its size."""
LABEL_W = 150
"""Room on the left of a Gantt for the side and lane labels."""
LANE_H = 16
"""Height of one Gantt lane."""

KIND_COLORS: dict[str, str] = {
    "forward": "#4e79a7",
    "backward": "#59a14f",
    "recompute": "#f28e2b",
    "optimizer": "#b07aa1",
    "all_reduce": "#e15759",
    "all_gather": "#76b7b2",
    "reduce_scatter": "#edc948",
    "all_to_all": "#ff9da7",
    "send": "#9c755f",
    "recv": "#bab0ac",
    "bubble": "#e6e6e6",
}
"""Fill colour per event kind (Tableau 10), shared by the Gantt and its legend."""
PART_COLORS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1")
"""Fill colours of the memory parts, in order of first appearance."""
_SHORT = {"forward": "F", "backward": "B", "recompute": "R"}


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryBar:
    """One pipeline stage's memory: predicted parts and, when measured, the measured peak."""

    label: str
    """Row label, e.g. ``stage 0``."""
    parts: tuple[tuple[str, float], ...]
    """Predicted (part name, GiB), stacked in this order."""
    measured_gib: float | None = None
    """Highest measured peak of the stage's ranks; None on a prediction-only page."""


def format_seconds(value_s: float) -> str:
    """A duration with a unit that keeps three significant digits: µs, ms or s."""
    magnitude = abs(value_s)
    if magnitude >= 1.0:
        return f"{value_s:.3g} s"
    if magnitude >= 1e-3 or magnitude == 0:
        return f"{value_s * 1e3:.3g} ms"
    return f"{value_s * 1e6:.3g} µs"


def format_bytes(value: float) -> str:
    """Bytes with a binary prefix: B, KiB, MiB, GiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} B"


def nice_ticks(lo: float, hi: float, target: int = 6) -> list[float]:
    """About ``target`` round tick values (1, 2, 5 x 10^k steps) covering [lo, hi]."""
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / target
    base = 10 ** math.floor(math.log10(raw))
    step = next(m * base for m in (1, 2, 5, 10) if m * base >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    count = math.floor((hi - first) / step + 1e-9) + 1
    return [first + i * step for i in range(count)]


def _svg(height: float, body: list[str], label: str, width: float = WIDTH) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width:.0f} {height:.0f}" '
        f'width="100%" role="img" aria-label="{escape(label)}" '
        f'font-family="system-ui, sans-serif" font-size="11">' + "".join(body) + "</svg>"
    )


def _text(x: float, y: float, text: str, **attrs: str) -> str:
    extra = "".join(f' {k.replace("_", "-")}="{v}"' for k, v in attrs.items())
    return f'<text x="{x:.1f}" y="{y:.1f}"{extra}>{escape(text)}</text>'


# ---- Gantt ---------------------------------------------------------------------------


def lanes_used(*event_lists: Sequence[TimelineEvent]) -> tuple[str, ...]:
    """Lanes with at least one event in any list, in `LANES` order; compute always."""
    used = {e.lane for events in event_lists for e in events} | {"compute"}
    return tuple(lane for lane in LANES if lane in used)


def _hover(e: TimelineEvent) -> str:
    parts = [e.name, f"kind {e.kind}"]
    if e.microbatch is not None:
        parts.append(f"microbatch {e.microbatch}")
    if e.chunk is not None:
        parts.append(f"chunk {e.chunk}")
    parts.append(f"start {format_seconds(e.start_s)}, duration {format_seconds(e.duration_s)}")
    if e.bytes:
        parts.append(f"bytes {format_bytes(e.bytes)} ({e.bytes:,})")
    if e.group:
        parts.append(f"group {e.group}")
    return "\n".join(parts)


def _bar(e: TimelineEvent, x0: float, scale: float, y: float) -> str:
    x = x0 + e.start_s * scale
    # Sub-pixel events stay visible as hairlines instead of vanishing.
    w = max(e.duration_s * scale, 0.6)
    fill = KIND_COLORS.get(e.kind, "#999999")
    label = ""
    if e.kind in _SHORT and e.microbatch is not None and w >= 16:
        tag = f"{_SHORT[e.kind]}{e.microbatch}" + (f".{e.chunk}" if e.chunk else "")
        if w >= 7 * len(tag):
            label = _text(x + w / 2, y + LANE_H - 5, tag, text_anchor="middle", fill="#ffffff")
    return (
        f'<g><rect x="{x:.2f}" y="{y + 1:.1f}" width="{w:.2f}" height="{LANE_H - 2}" '
        f'fill="{fill}"><title>{escape(_hover(e))}</title></rect>{label}</g>'
    )


def gantt_svg(
    *,
    rank: int,
    sides: Sequence[tuple[str, Sequence[TimelineEvent], float]],
    axis_end_s: float,
    lanes: Sequence[str],
) -> str:
    """Gantt chart of one rank: each side (label, events, iteration time) as a block of
    lanes, stacked top to bottom on one shared time axis from 0 to ``axis_end_s``.

    A dashed line marks each side's iteration time. ``lanes`` fixes the rows so the
    predicted and the measured block line up.
    """
    plot_w = WIDTH - LABEL_W - 20
    scale = plot_w / axis_end_s if axis_end_s > 0 else 0.0
    body: list[str] = []
    y = 4.0
    # Two lanes at least, so the two-line side label fits beside the block.
    block_h = LANE_H * max(2, len(lanes))
    for label, events, iteration_s in sides:
        body.append(
            f'<rect x="{LABEL_W}" y="{y:.1f}" width="{plot_w}" height="{block_h}" '
            'fill="#fafafa" stroke="#dddddd"/>'
        )
        body.append(_text(6, y + 12, f"rank {rank}", font_weight="600"))
        body.append(_text(6, y + 26, label, fill="#52606d"))
        if len(lanes) >= 3 and iteration_s > 0:
            body.append(_text(6, y + 40, format_seconds(iteration_s), fill="#52606d"))
        for i, lane in enumerate(lanes):
            lane_y = y + i * LANE_H
            body.append(_text(LABEL_W - 6, lane_y + LANE_H - 4, lane, text_anchor="end"))
            if i:
                body.append(
                    f'<line x1="{LABEL_W}" x2="{LABEL_W + plot_w}" y1="{lane_y:.1f}" '
                    f'y2="{lane_y:.1f}" stroke="#eeeeee"/>'
                )
            body.extend(_bar(e, LABEL_W, scale, lane_y) for e in events if e.lane == lane)
        if iteration_s > 0:
            x = LABEL_W + iteration_s * scale
            body.append(
                f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y - 2:.1f}" y2="{y + block_h + 2:.1f}" '
                'stroke="#333333" stroke-dasharray="3 2"><title>'
                f"{escape(label)} iteration time {format_seconds(iteration_s)}</title></line>"
            )
        y += block_h + 8
    body.append(_time_axis(LABEL_W, plot_w, y, axis_end_s))
    return _svg(y + 22, body, f"timeline of rank {rank}")


def _time_axis(x0: float, plot_w: float, y: float, end_s: float) -> str:
    parts = [f'<line x1="{x0}" x2="{x0 + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#888888"/>']
    if end_s <= 0:
        return "".join(parts)
    for tick in nice_ticks(0.0, end_s):
        x = x0 + tick / end_s * plot_w
        parts.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y:.1f}" y2="{y + 4:.1f}" stroke="#888888"/>'
        )
        parts.append(_text(x, y + 15, format_seconds(tick), text_anchor="middle", fill="#555555"))
    return "".join(parts)


def legend_html(kinds: Sequence[str]) -> str:
    """Colour legend of the given event kinds as inline HTML swatches."""
    items = [
        f'<span class="swatch" style="background:{KIND_COLORS.get(k, "#999999")}"></span>'
        f"{escape(k.replace('_', ' '))}"
        for k in kinds
    ]
    return '<div class="legend">' + "".join(f"<span>{i}</span>" for i in items) + "</div>"


# ---- memory --------------------------------------------------------------------------


def memory_bars_svg(bars: Sequence[MemoryBar]) -> str:
    """Horizontal bars per stage: the predicted parts stacked, the measured peak below."""
    names = list(dict.fromkeys(name for bar in bars for name, _ in bar.parts))
    colors = {name: PART_COLORS[i % len(PART_COLORS)] for i, name in enumerate(names)}
    top = max(
        [sum(g for _, g in bar.parts) for bar in bars]
        + [bar.measured_gib or 0.0 for bar in bars]
        + [1e-9]
    )
    plot_w = WIDTH - LABEL_W - 90
    scale = plot_w / top
    body: list[str] = []
    y = 6.0
    for bar in bars:
        x = float(LABEL_W)
        body.append(_text(LABEL_W - 6, y + 13, f"{bar.label} predicted", text_anchor="end"))
        for name, gib in bar.parts:
            w = gib * scale
            body.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="18" '
                f'fill="{colors[name]}"><title>{escape(f"{name}: {gib:.3g} GiB")}</title></rect>'
            )
            x += w
        total = sum(g for _, g in bar.parts)
        body.append(_text(x + 6, y + 13, f"{total:.3g} GiB"))
        y += 22
        if bar.measured_gib is not None:
            w = bar.measured_gib * scale
            body.append(_text(LABEL_W - 6, y + 13, f"{bar.label} measured", text_anchor="end"))
            body.append(
                f'<rect x="{LABEL_W}" y="{y:.1f}" width="{w:.1f}" height="18" fill="#555555">'
                f"<title>{escape(f'measured peak: {bar.measured_gib:.3g} GiB')}</title></rect>"
            )
            body.append(_text(LABEL_W + w + 6, y + 13, f"{bar.measured_gib:.3g} GiB"))
            y += 22
        y += 8
    x = float(LABEL_W)
    for name in names:
        item_w = legend_item_width(name)
        if x > LABEL_W and x + item_w > WIDTH:  # wrap instead of running off the image
            x, y = float(LABEL_W), y + 16
        body.append(f'<rect x="{x:.0f}" y="{y:.0f}" width="10" height="10" fill="{colors[name]}"/>')
        body.append(_text(x + 14, y + 9, name))
        x += item_w
    return _svg(y + 18, body, "memory per pipeline stage")


def legend_item_width(name: str) -> float:
    """Width of one legend item of the memory chart: swatch, gap and ~7 px per character
    (the 12 px sans-serif text), plus the gap to the next item."""
    return 24 + 7 * len(name)


# ---- loss curve and iteration times -------------------------------------------------


def _frame(x0: float, y0: float, w: float, h: float) -> str:
    return (
        f'<line x1="{x0}" x2="{x0 + w}" y1="{y0 + h}" y2="{y0 + h}" stroke="#888888"/>'
        f'<line x1="{x0}" x2="{x0}" y1="{y0}" y2="{y0 + h}" stroke="#888888"/>'
    )


def _y_axis(box: tuple[float, float, float, float], lo: float, hi: float, label: str) -> str:
    """Grid lines, tick labels and a rotated axis label for values lo..hi in a plot box."""
    x0, y0, w, h = box
    parts = []
    for tick in nice_ticks(lo, hi, 4):
        y = y0 + h - (tick - lo) / (hi - lo) * h
        parts.append(f'<line x1="{x0}" x2="{x0 + w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eeeeee"/>')
        text = format_seconds(tick) if label.endswith("time") else f"{tick:.3g}"
        parts.append(_text(x0 - 6, y + 4, text, text_anchor="end", fill="#555555"))
    cy = y0 + h / 2
    parts.append(
        f'<text x="14" y="{cy:.1f}" transform="rotate(-90 14 {cy:.1f})" text-anchor="middle" '
        f'fill="#555555">{escape(label)}</text>'
    )
    return "".join(parts) + _frame(x0, y0, w, h)


def _step_axis(box: tuple[float, float, float, float], n: int) -> str:
    x0, y0, w, h = box
    parts = []
    for tick in nice_ticks(1, n, 6) if n > 1 else [1.0]:
        if float(tick).is_integer() and 1 <= tick <= n:
            x = x0 + ((tick - 1) / (n - 1) * w if n > 1 else w / 2)
            parts.append(_text(x, y0 + h + 15, f"{tick:.0f}", text_anchor="middle"))
    parts.append(_text(x0 + w / 2, y0 + h + 30, "step", text_anchor="middle", fill="#555555"))
    return "".join(parts)


def line_chart_svg(values: Sequence[float], *, y_label: str) -> str:
    """A line with dots over steps 1..n (the loss curve), half width."""
    box = (62.0, 10.0, HALF_WIDTH - 80.0, 170.0)
    x0, y0, w, h = box
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.08 or abs(hi) * 0.1 or 1.0
    lo, hi = lo - pad, hi + pad
    n = len(values)
    points = [
        (x0 + (i / (n - 1) * w if n > 1 else w / 2), y0 + h - (v - lo) / (hi - lo) * h)
        for i, v in enumerate(values)
    ]
    body = [_y_axis(box, lo, hi, y_label), _step_axis(box, n)]
    body.append(
        '<polyline fill="none" stroke="#4e79a7" stroke-width="2" points="'
        + " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        + '"/>'
    )
    for i, ((x, y), v) in enumerate(zip(points, values, strict=True)):
        body.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="#4e79a7">'
            f"<title>{escape(f'step {i + 1}: {y_label} {v:.4g}')}</title></circle>"
        )
    return _svg(y0 + h + 38, body, f"{y_label} per step", HALF_WIDTH)


def iteration_times_svg(values_s: Sequence[float], *, lines: Sequence[tuple[str, float]]) -> str:
    """Iteration time of every step as bars from zero, with labelled horizontal reference
    lines (median, p95, prediction), half width. Steps stay in order so a slow warm-up
    step or a drift shows where it happened."""
    box = (62.0, 10.0, HALF_WIDTH - 175.0, 170.0)
    x0, y0, w, h = box
    hi = max([*values_s, *(v for _, v in lines)]) * 1.08 or 1.0
    n = len(values_s)
    slot = w / n
    body = [
        _y_axis(box, 0.0, hi, "iteration time"),
        _step_axis((x0 + slot / 2, y0, w - slot, h), n),
    ]
    for i, v in enumerate(values_s):
        bh = v / hi * h
        body.append(
            f'<rect x="{x0 + i * slot + slot * 0.15:.1f}" y="{y0 + h - bh:.1f}" '
            f'width="{max(slot * 0.7, 0.8):.1f}" height="{bh:.1f}" fill="#9fb7d3">'
            f"<title>{escape(f'step {i + 1}: {format_seconds(v)}')}</title></rect>"
        )
    label_y = -1e9
    for label, value in sorted(lines, key=lambda lv: -lv[1]):
        y = y0 + h - value / hi * h
        color = {"predicted": "#e15759", "median": "#1f2933"}.get(label, "#b7791f")
        body.append(
            f'<line x1="{x0}" x2="{x0 + w}" y1="{y:.1f}" y2="{y:.1f}" stroke="{color}" '
            'stroke-width="1.5" stroke-dasharray="5 3"/>'
        )
        # Labels of close lines are pushed apart so they never print over each other.
        label_y = max(y + 4, label_y + 13)
        body.append(_text(x0 + w + 6, label_y, f"{label} {format_seconds(value)}", fill=color))
    return _svg(y0 + h + 38, body, "iteration time per step", HALF_WIDTH)
