"""The summary card of the report page (`reports.html`): the plan's facts, predicted
against measured iteration time, throughput, MFU, peak memory and the host probe, and the
verdict."""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from reports.compare import Comparison
from reports.html_cells import error_cell, number, optional, pct, table_html, td, tr
from reports.svg import format_seconds
from specs.bundle import PlanBundle
from specs.formats import BF16_PEAK_DTYPES, percent


def facts(bundle: PlanBundle, microbatches: int) -> str:
    m, c, j, p = bundle.model, bundle.cluster, bundle.job, bundle.plan
    model = f"{m.name}: {m.num_layers} layers, h {m.hidden_size}, {m.num_attention_heads} heads"
    if m.num_experts:
        model += f", {m.num_experts} experts top-{m.moe_top_k}"
    per_node = f", {c.gpus_per_node} per node" if c.gpus_per_node else ""
    facts = [
        ("model", model),
        ("cluster", f"{c.num_gpus}× {c.hardware}{per_node}"),
        ("job", f"seq {j.seq_length}, global batch {j.global_batch_size}, {j.precision}"),
        ("plan", f"{p.label()}, {p.schedule}, {microbatches} microbatches"),
    ]
    items = "".join(f"<div><dt>{escape(k)}</dt><dd>{escape(v)}</dd></div>" for k, v in facts)
    return f'<dl class="facts">{items}</dl>'


def _measured(metrics: Mapping[str, Any] | None, key: str) -> float | None:
    """``metrics[key]`` as a number; None when the run did not record it (a run without
    model FLOPs or a device peak writes ``"mfu": null``)."""
    value = metrics.get(key) if metrics else None
    return None if value is None else float(value)


def summary_rows(
    estimate: Mapping[str, Any],
    metrics: Mapping[str, Any] | None,
    c: Comparison | None,
    probe_reference_s: float | None = None,
) -> list[tuple[str, str, str, float | None]]:
    """(quantity, predicted, measured, error) rows of the summary table; the host probe's
    row compares the profile's probe (the host speed the prediction assumes) with the
    run's."""
    iteration = (
        "iteration time",
        format_seconds(c.iteration_time_predicted_s if c else float(estimate["iteration_time_s"])),
        format_seconds(c.iteration_time_measured_s) if c else "–",
        c.iteration_time_error if c else None,
    )
    rows = [iteration]
    tokens_p = float(estimate["tokens_per_s"])
    tokens_m = _measured(metrics, "tokens_per_s")
    rows.append(("tokens/s", number(tokens_p), optional(tokens_m, number), rel(tokens_p, tokens_m)))
    mfu_p = float(estimate["mfu"])
    mfu_m = _measured(metrics, "mfu")
    dtype = estimate.get("mfu_peak_dtype", "bf16")
    mfu_label = "MFU (model FLOPs)" if dtype in BF16_PEAK_DTYPES else f"MFU ({dtype} peak)"
    rows.append((mfu_label, percent(mfu_p), optional(mfu_m, percent), rel(mfu_p, mfu_m)))
    if dtype not in BF16_PEAK_DTYPES and estimate.get("mfu_bf16") is not None:
        rows.append(("MFU (bf16 peak)", percent(float(estimate["mfu_bf16"])), "–", None))
    if "hfu" in estimate:
        rows.append(("HFU (with recompute)", percent(float(estimate["hfu"])), "–", None))
    peak_p = float(estimate["peak_memory_gib"])
    peak_m = c.peak_memory_measured_gib if c else None
    fits = "" if estimate.get("fits", True) else " (does not fit)"
    rows.append(
        (
            "peak memory",
            f"{peak_p:.3g} GiB{fits}",
            optional(peak_m, "{:.3g} GiB".format),
            c.peak_memory_error if c else None,
        )
    )
    probe_m = metrics.get("host_probe_p50_s") if metrics else None
    if probe_m is not None:
        rows.append(
            (
                "host probe (host speed)",
                optional(probe_reference_s, format_seconds),
                format_seconds(float(probe_m)),
                rel(probe_reference_s, float(probe_m)) if probe_reference_s else None,
            )
        )
    steal_m = _measured(metrics, "host_steal_timed")
    if steal_m is not None:
        rows.append(("CPU stolen by the hypervisor", "0%", f"{steal_m:.2%}", None))
    return rows


def rel(predicted: float, measured: float | None) -> float | None:
    return (predicted - measured) / measured if measured else None


def summary_section(
    bundle: PlanBundle,
    estimate: Mapping[str, Any],
    metrics: Mapping[str, Any] | None,
    c: Comparison | None,
    probe_reference_s: float | None = None,
) -> str:
    microbatches = bundle.plan.num_microbatches(bundle.job.global_batch_size)
    cells = [
        [td(q), td(p), td(m), error_cell(e)]
        for q, p, m, e in summary_rows(estimate, metrics, c, probe_reference_s)
    ]
    headers = ["", "predicted", "measured", "error"]
    # A prediction-only page has no measured or error column to fill.
    keep = 4 if c is not None else 2
    rows = [tr(row[:keep]) for row in cells]
    table = table_html(headers[:keep], rows, "summary-table")
    if c is None and metrics is not None and metrics.get("status") == "failed":
        ran = len(metrics.get("loss") or [])
        verdict = (
            f'<div class="verdict bad"><b>run failed</b>{ran} measured steps ran; '
            "no measured timeline</div>"
        )
    elif c is None:
        verdict = '<div class="verdict"><b>prediction only</b>no measured run yet</div>'
    else:
        cls = {"within 5%": "good", "within 15%": "warn", "off": "bad"}.get(c.verdict, "")
        verdict = (
            f'<div class="verdict {cls}"><b>{escape(c.verdict)}</b>iteration time '
            f"{pct(c.iteration_time_error)} vs measured</div>"
        )
    probe_note = (
        '<p class="note">Host probe: the same fixed host work (<code>profiles.host_probe'
        "</code>), timed while profiling and after each unprofiled step of the run. Below "
        "0%, the host ran slower during the run than when it was profiled (other load on a "
        "shared machine), and every measured time with it.</p>"
        if metrics and metrics.get("host_probe_p50_s") is not None
        else ""
    )
    if metrics and metrics.get("host_steal_timed") is not None:
        probe_note += (
            '<p class="note">CPU stolen: the share of the machine\'s CPU time the hypervisor '
            "gave other guests during the timed steps (<code>/proc/stat</code> steal). The "
            "prediction assumes none; a collective-bound step slows by much more than the "
            "share, as a stolen slice stops one rank while its peers wait for it.</p>"
        )
    return (
        '<section id="summary" class="card summary"><h2>Summary</h2>'
        + facts(bundle, microbatches)
        + f'<div class="summary-grid">{table}{verdict}</div>{probe_note}</section>'
    )
