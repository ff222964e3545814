"""The report's MFU for a job whose GEMMs are not bf16: over its own peak, labelled, and
over the bf16 peak (`reports.html_summary.summary_rows`, `reports.html_run`)."""

from __future__ import annotations

from reports.html_run import candidates_section
from reports.html_summary import summary_rows

FP8_ESTIMATE = {
    "iteration_time_s": 2.0,
    "tokens_per_s": 1000.0,
    "mfu": 0.3,
    "mfu_peak_dtype": "fp8",
    "mfu_bf16": 0.6,
    "hfu": 0.3,
    "peak_memory_gib": 40.0,
}


def test_summary_names_the_fp8_peak_and_adds_the_bf16_one() -> None:
    rows = {name: (predicted, measured) for name, predicted, measured, _ in summary_rows(
        FP8_ESTIMATE, {"mfu": 0.25}, None
    )}  # fmt: skip
    assert rows["MFU (fp8 peak)"] == ("30.0%", "25.0%")
    assert rows["MFU (bf16 peak)"] == ("60.0%", "–")
    assert "MFU (model FLOPs)" not in rows


def test_summary_of_a_bf16_estimate_or_an_older_file_has_one_mfu_row() -> None:
    bf16 = {**FP8_ESTIMATE, "mfu_peak_dtype": "bf16", "mfu_bf16": 0.3}
    older = {k: v for k, v in FP8_ESTIMATE.items() if not k.startswith("mfu_")}
    for estimate in (bf16, older):
        names = [name for name, *_ in summary_rows(estimate, None, None)]
        assert [n for n in names if n.startswith("MFU")] == ["MFU (model FLOPs)"]


def test_candidates_table_labels_both_peaks() -> None:
    plan = {"label": "tp2 pp1 dp4 mbs1 sp", "fits": True, **FP8_ESTIMATE}
    page = candidates_section({"plans": [plan], "explanation": ""})
    assert "<td>30.0% of the fp8 peak, 60.0% of the bf16 peak</td>" in page
    bf16 = candidates_section([{**plan, "mfu_peak_dtype": "bf16", "mfu_bf16": 0.3}])
    assert "<td>30.0%</td>" in bf16
