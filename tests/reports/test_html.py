"""The report page: sections present, names escaped, prediction-only mode, well-formed
markup, and the SVG helpers it is built from. `sample_run` comes from conftest.py."""

from __future__ import annotations

import dataclasses
import re
import statistics
from html import escape
from html.parser import HTMLParser
from typing import Any

import pytest

from reports.compare import compare
from reports.html import MAX_RANKS_DRAWN, render_report
from reports.html_phases import profiled_steps_note
from reports.svg import (
    MemoryBar,
    format_bytes,
    format_seconds,
    gantt_svg,
    lanes_used,
    legend_item_width,
    memory_bars_svg,
    nice_ticks,
)
from specs.errors import SpecError
from specs.timeline import Timeline, TimelineEvent

VOID = {"meta", "br", "img", "input", "link", "hr", "col", "wbr", "area", "base", "source"}
SVG_SELF_CLOSING = {"rect", "line", "circle", "polyline", "path"}


class TagBalance(HTMLParser):
    """Records every start tag and checks that end tags close them in order."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.starts: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.starts.append((tag, dict(attrs)))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.starts.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()


def parse(page: str) -> TagBalance:
    parser = TagBalance()
    parser.feed(page)
    parser.close()
    return parser


def ids(parser: TagBalance) -> set[str]:
    return {a["id"] for _, a in parser.starts if a.get("id")}


def full_page(run: Any) -> str:
    return render_report(
        run.bundle,
        run.estimate,
        run.predicted,
        run.measured,
        run.metrics,
        candidates=run.candidates,
    )


def test_full_report_has_every_section(sample_run: Any) -> None:
    page = full_page(sample_run)
    parser = parse(page)
    assert parser.errors == [] and parser.stack == []
    assert {
        "summary",
        "timelines",
        "phase-errors",
        "memory",
        "ledger",
        "loss",
        "iteration-times",
        "candidates",
    } <= ids(parser)
    figures = [a for t, a in parser.starts if t == "figure"]
    # predicted shows ranks 0 and 4; both get a predicted and a measured block
    assert [(f["data-rank"], f["data-sides"]) for f in figures] == [
        ("0", "predicted measured"),
        ("4", "predicted measured"),
    ]
    assert "Measured only: ranks 1, 2, 3, 5, 6, 7. The prediction draws one rank" in page
    assert "averaged over the predicted ranks 0, 4 (one per pipeline stage)" in page
    for label in ("forward", "backward", "DP exposed", "bubble (idle)", "optimizer", "iteration"):
        assert f"<td>{label}</td>" in page
    assert "within 15%" in page  # the sample is ~8% slower than predicted
    assert "58,619" in page and "53,921" in page  # tokens/s predicted vs measured


def test_report_is_self_contained(sample_run: Any) -> None:
    page = full_page(sample_run)
    assert "<script" not in page
    assert not re.search(r"\b(src|href)=", page)
    # the only URL is the SVG namespace, which is a name, never fetched
    assert set(re.findall(r"https?://[^\s\"'<>]+", page)) == {"http://www.w3.org/2000/svg"}


def test_report_escapes_names(sample_run: Any) -> None:
    evil = '<img src=x onerror="alert(1)">&'
    model = dataclasses.replace(sample_run.bundle.model, name=evil)
    bundle = dataclasses.replace(sample_run.bundle, model=model)
    event = TimelineEvent(
        rank=0, lane="compute", name=evil, kind="forward", start_s=0.0, duration_s=0.5, microbatch=0
    )
    predicted = Timeline(source="predicted", events=(event,), iteration_time_s=1.0)
    page = render_report(bundle, sample_run.estimate, predicted, candidates=sample_run.candidates)
    assert evil not in page
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;&amp;" in page
    assert "<script>alert(1)</script>" not in page  # from the candidates' explanation
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert not any(t == "img" for t, _ in parse(page).starts)


def test_prediction_only_page(sample_run: Any) -> None:
    page = render_report(sample_run.bundle, sample_run.estimate, sample_run.predicted)
    parser = parse(page)
    assert parser.errors == [] and parser.stack == []
    found = ids(parser)
    assert {"summary", "timelines", "phase-breakdown", "memory", "ledger"} <= found
    assert not found & {"phase-errors", "loss", "iteration-times", "candidates"}
    figures = [a for t, a in parser.starts if t == "figure"]
    assert [f["data-sides"] for f in figures] == ["predicted", "predicted"]
    assert "prediction only" in page
    assert "<th>measured</th>" not in page  # no empty measured columns
    assert "compute backward" in page  # the estimate's breakdown


def test_given_comparison_is_used_as_is(sample_run: Any) -> None:
    r = sample_run
    c = compare(r.predicted, r.measured, plan=r.bundle.plan, estimate=r.estimate, metrics=r.metrics)
    assert render_report(r.bundle, r.estimate, r.predicted, r.measured, r.metrics) == (
        render_report(r.bundle, r.estimate, r.predicted, r.measured, r.metrics, comparison=c)
    )
    shifted = dataclasses.replace(c, verdict="off", iteration_time_error=0.5)
    page = render_report(r.bundle, r.estimate, r.predicted, r.measured, r.metrics, shifted)
    assert 'class="verdict bad"' in page and "+50.0%" in page


def test_many_ranks_are_listed_not_drawn(sample_run: Any) -> None:
    events = tuple(
        TimelineEvent(
            rank=r,
            lane="compute",
            name="F",
            kind="forward",
            start_s=0.0,
            duration_s=1.0,
            microbatch=0,
        )
        for r in range(MAX_RANKS_DRAWN + 3)
    )
    predicted = Timeline(source="predicted", events=events, iteration_time_s=1.0)
    page = render_report(sample_run.bundle, sample_run.estimate, predicted)
    assert page.count("<figure") == MAX_RANKS_DRAWN
    assert "3 more ranks not drawn: 16, 17, 18." in page


# ---- SVG helpers ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(2.236, "2.24 s"), (0.0397, "39.7 ms"), (0.0, "0 ms"), (4.2e-5, "42 µs"), (-0.198, "-198 ms")],
)
def test_format_seconds(seconds: float, text: str) -> None:
    assert format_seconds(seconds) == text


def test_format_bytes_and_ticks() -> None:
    assert format_bytes(2**31) == "2 GiB"
    assert format_bytes(503_316_480) == "480 MiB"
    assert format_bytes(100) == "100 B"
    assert nice_ticks(0.0, 2.43) == pytest.approx([0.0, 0.5, 1.0, 1.5, 2.0])
    assert nice_ticks(1, 20, 6) == pytest.approx([5, 10, 15, 20])
    assert nice_ticks(3.0, 3.0) == [3.0]


def test_gantt_lanes_line_up_and_hover_text() -> None:
    p = [
        TimelineEvent(
            rank=0,
            lane="compute",
            name="F mb3",
            kind="forward",
            start_s=0.0,
            duration_s=1.0,
            microbatch=3,
        )
    ]
    m = [
        TimelineEvent(
            rank=0,
            lane="dp",
            name="dp rs",
            kind="reduce_scatter",
            start_s=1.0,
            duration_s=0.5,
            bytes=1024,
            group="dp",
        )
    ]
    lanes = lanes_used(p, m)
    assert lanes == ("compute", "dp")
    svg = gantt_svg(
        rank=0, sides=[("predicted", p, 1.0), ("measured", m, 1.5)], axis_end_s=1.5, lanes=lanes
    )
    assert svg.count(">compute</text>") == 2 and svg.count(">dp</text>") == 2
    assert "microbatch 3" in svg and "duration 1 s" in svg
    assert "bytes 1 KiB (1,024)" in svg and "group dp" in svg
    assert ">F3</text>" in svg  # wide bars carry their microbatch


def test_measured_run_without_metrics(sample_run: Any) -> None:
    r = sample_run
    page = render_report(r.bundle, r.estimate, r.predicted, r.measured)
    found = ids(parse(page))
    assert {"phase-errors", "ledger"} <= found
    assert not found & {"loss", "iteration-times", "memory-ranks"}
    assert "grey bar" not in page  # no measured memory to draw


def test_estimate_without_a_needed_key_is_named(sample_run: Any) -> None:
    estimate = {k: v for k, v in sample_run.estimate.items() if k != "tokens_per_s"}
    with pytest.raises(SpecError, match="missing key 'tokens_per_s'"):
        render_report(sample_run.bundle, estimate, sample_run.predicted)


def test_host_probe_row_compares_the_run_with_the_profile(sample_run: Any) -> None:
    r = sample_run
    metrics = {**r.metrics, "host_probe_p50_s": 8e-4}
    page = render_report(
        r.bundle, r.estimate, r.predicted, r.measured, metrics, host_probe_reference_s=6e-4
    )
    row = re.search(r"<tr><td>host probe \(host speed\)</td>(.*?)</tr>", page)
    assert row is not None
    # the run's probe took a third longer: the host ran slower than when it was profiled
    assert "600 µs" in row.group(1) and "800 µs" in row.group(1)
    assert "-25.0%" in row.group(1) and 'class="bad"' in row.group(1)
    assert "Below 0%, the host ran slower" in page
    no_reference = render_report(r.bundle, r.estimate, r.predicted, r.measured, metrics)
    assert "<tr><td>host probe (host speed)</td><td>–</td>" in no_reference
    assert "host probe" not in full_page(r)  # the run did not probe: no row, no note


def test_steal_row_shows_the_cpu_share_the_hypervisor_took(sample_run: Any) -> None:
    r = sample_run
    metrics = {**r.metrics, "host_steal_timed": 0.047}
    page = render_report(r.bundle, r.estimate, r.predicted, r.measured, metrics)
    assert parse(page).errors == []
    row = re.search(r"<tr><td>CPU stolen by the hypervisor</td>(.*?)</tr>", page)
    assert row is not None and "<td>0%</td><td>4.70%</td>" in row.group(1)
    assert "a stolen slice stops one rank" in page
    assert "CPU stolen" not in full_page(r)  # no steal figure recorded: no row, no note


def test_a_run_without_mfu_still_reports(sample_run: Any) -> None:
    # a run on a host without a device peak records "mfu": null (the fidelity bench's runs)
    r = sample_run
    metrics = {**r.metrics, "mfu": None, "tokens_per_s": None}
    page = render_report(r.bundle, r.estimate, r.predicted, r.measured, metrics)
    assert parse(page).errors == []
    assert "MFU (model FLOPs)" in page


def test_memory_legend_wraps_inside_the_chart() -> None:
    names = [f"part number {i} with a long name" for i in range(7)]
    svg = memory_bars_svg([MemoryBar(label="stage 0", parts=tuple((n, 1.0) for n in names))])
    height = float(re.search(r'viewBox="0 0 [\d.]+ ([\d.]+)"', svg).group(1))
    swatches = [
        (float(x), float(y))
        for x, y in re.findall(r'<rect x="([\d.]+)" y="([\d.]+)" width="10" height="10"', svg)
    ]
    assert len(swatches) == len(names)
    for (x, y), name in zip(swatches, names, strict=True):
        assert x + legend_item_width(name) <= 1100 and y + 10 <= height
    assert len({y for _, y in swatches}) > 1  # more than one legend row


def test_phase_table_says_which_steps_were_profiled(sample_run: Any) -> None:
    comparison = compare(
        sample_run.predicted,
        sample_run.measured,
        plan=sample_run.bundle.plan,
        estimate=sample_run.estimate,
        metrics=sample_run.metrics,
    )
    times = [float(t) for t in sample_run.metrics["iteration_time_s"]]
    n = comparison.measured_iterations
    note = profiled_steps_note(comparison, sample_run.metrics)
    profiled = sum(times[-n:]) / n
    median = statistics.median(times)
    assert f"of {len(times)} measured steps" in note
    assert f"{(profiled - median) / median:+.1%} from the median step" in note
    assert escape(note) in full_page(sample_run)
    # without the step times the note still names how many steps were profiled
    assert profiled_steps_note(comparison, None) == f"Measured phases: {n} profiled step(s)."
