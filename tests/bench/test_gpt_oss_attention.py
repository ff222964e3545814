"""bench/gpt_oss_attention.py: the checks of the GPT-OSS 120B residual's explanations on the
26.02.01 rows of ``published-runs-dev.csv`` (265: GB300, 266: GB200, one plan: tp1 pp1 ep64
mbs4, sequence 4096, GPT-OSS 120B: 36 layers, 64 query heads of 64)."""

from __future__ import annotations

import dataclasses

import pytest

from tests.bench.bench_loader import load_bench

leads = load_bench("gpt_oss_attention")
rows_mod = load_bench("published_rows")
figures = load_bench("row_figures")


@pytest.fixture(scope="module")
def rows() -> dict[str, dict[str, str]]:
    path = leads.default_csv()
    if path is None:
        pytest.skip("published-runs-dev.csv not found")
    return {r["row_id"]: r for r in leads.read_rows(path) if r["row_id"] in ("265", "266")}


def test_unfused_attention_cannot_fit_the_published_run(rows):
    case = rows_mod.case_for_row(rows["266"])
    fused = figures.case_estimate(case)
    unfused = figures.case_estimate(
        case, options=dataclasses.replace(case.options, attention="materialized")
    )
    # UnfusedDotProductAttention saves at least the bf16 probabilities of every layer for
    # backward: layers x micro-batch x heads x s^2 x 2 bytes (TE `unfused_dpa.py`)
    probabilities_bytes = 36 * 4 * 64 * 4096**2 * 2
    assert unfused.peak_memory_bytes - fused.peak_memory_bytes >= probabilities_bytes
    assert unfused.peak_memory_bytes > unfused.device_memory_bytes >= fused.peak_memory_bytes


def test_core_attention_is_priced_at_full_causal_cost_on_window_layers(rows):
    case = rows_mod.case_for_row(rows["266"])
    core, whole, _, _ = leads.layer_parts(case)
    no_window = dataclasses.replace(
        case, model=dataclasses.replace(case.model, sliding_window=None)
    )
    assert leads.layer_parts(no_window)[0] == pytest.approx(core)
    assert 0.0 < core < whole


def test_eager_attention_launches_only_without_the_attn_graph(rows):
    gb300, gb200 = leads.report(rows["265"]), leads.report(rows["266"])
    assert "+ 0 eager" in gb300
    assert f"+ {leads.ATTENTION_BLOCK_LAUNCHES} eager" in gb200
    _, _, even, priced = leads.layer_parts(rows_mod.case_for_row(rows["266"]))
    assert even > priced


def test_report_prices_a_row_with_fp8_attention():
    path = leads.default_csv()
    if path is None:
        pytest.skip("published-runs-dev.csv not found")
    raw = next(r for r in leads.read_rows(path) if r["row_id"] == "127")
    case = rows_mod.case_for_row(raw)
    assert case.options.fp8_attention  # the 26.06 recipe runs FP8 attention
    line = leads.report(raw)
    assert line.startswith(" 127 ") and "unfused" in line
