"""bench/nvfp4_rows.py: one dense layer of a published NVFP4 or FP8 row split into GEMMs,
quantization and TP communication (rows 285 and 284 of ``published-runs-dev.csv``: Llama 3
70B on 64 GB200 at tp2 with sequence parallelism, and on 64 GB300 at tp1)."""

from __future__ import annotations

import pytest

from costmodel.compute import NVFP4_BYTES
from tests.bench.bench_loader import load_bench
from tests.bench.validation_cases import dev_rows

nvfp4_rows = load_bench("nvfp4_rows")
rows_mod = load_bench("published_rows")


def _row(row_id: str) -> dict[str, str]:
    return dev_rows(row_id)[0]


def test_tp2_layer_parts_add_up_and_gather_nvfp4_bytes():
    parts = nvfp4_rows.dense_layer_parts(rows_mod.case_for_row(_row("285")))
    for direction in (0, 1):
        named = ("linear GEMMs", "nvfp4 quantize", "tp comm exposed", "rest of layer")
        total = sum(parts[name][direction] for name in named)
        assert total == pytest.approx(parts["layer (all)"][direction])
        assert 0.0 < parts["nvfp4 quantize"][direction] < parts["linear GEMMs"][direction]
        assert 0.0 < parts["tp comm exposed"][direction] <= parts["tp comm (all)"][direction]
    # 8192 tokens x 8192 wide, two pairs: forward 2 NVFP4 all-gathers (one copy) and 2 bf16
    # reduce-scatters; backward the gathers move two copies.
    size = 8192 * 8192
    forward_gb, backward_gb = parts["tp GB"]
    assert forward_gb == pytest.approx(2 * size * (NVFP4_BYTES + 2) / 1e9, rel=1e-6)
    assert backward_gb == pytest.approx(2 * size * (2 * NVFP4_BYTES + 2) / 1e9, rel=1e-6)


def test_tp1_row_has_no_tp_traffic_and_the_report_names_the_stage():
    row = _row("284")
    parts = nvfp4_rows.dense_layer_parts(rows_mod.case_for_row(row))
    assert parts["tp comm (all)"] == (0.0, 0.0)
    text = nvfp4_rows.report(row)
    assert "tp1 pp4 vpp5 dp16" in text and "(20 layers x 16)" in text


def test_fp8_rows_gather_fp8_bytes_on_both_tp_paths():
    # Row 116 (Llama 3.1 405B, GB300, tp4, current scaling, tp_comm_overlap): every
    # userbuffers all-gather moves the FP8 copy, 1 byte per element (initialize_ub fp8_buf),
    # the reduce-scatters bf16. Row 117 (tp2, MXFP8, tp_comm_overlap) adds the NCCL
    # all-gathers of the E8M0 scales, 1/32 byte per element: forward one per pair, backward
    # three (row-wise and column-wise output gradient, the norm output's column-wise copy)
    # with the column-wise output gradient's data. 8192 tokens (4096 on a cp2 rank) x 16384
    # wide, two pairs.
    size = 8192 * 16384
    current = nvfp4_rows.dense_layer_parts(rows_mod.case_for_row(_row("116")))
    assert current["tp GB"] == pytest.approx((2 * size * 3 / 1e9, 2 * size * 3 / 1e9))
    mx = nvfp4_rows.dense_layer_parts(rows_mod.case_for_row(_row("117")))
    forward_gb, backward_gb = mx["tp GB"]
    assert forward_gb == pytest.approx(2 * size / 2 * (3 + 1 / 32) / 1e9, rel=1e-6)
    assert backward_gb == pytest.approx(2 * size / 2 * (4 + 3 / 32) / 1e9, rel=1e-6)
