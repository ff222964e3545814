"""bench/moe_breakdown.py: the per-part breakdown of a published MoE row (row 174 of
``published-runs-dev.csv``: DeepSeek-V3 on 256 B200, pp 8, vpp 2, ep 32, DeepEP with the
1F1B all-to-all overlap)."""

from __future__ import annotations

import pytest

from tests.bench.bench_loader import load_bench
from tests.bench.validation_cases import dev_rows

breakdown = load_bench("moe_breakdown")
rows_mod = load_bench("published_rows")


@pytest.fixture(scope="module")
def row_174() -> dict[str, str]:
    return dev_rows("174")[0]


def test_layer_parts_split_the_moe_layer(row_174):
    parts = breakdown.moe_layer_parts(rows_mod.case_for_row(row_174))
    for direction in (0, 1):
        assert parts["expert GEMMs"][direction] > 0.0
        # row 174 is MXFP8: the expert operands are quantized, inside the routed experts
        assert 0.0 < parts["expert fp8 quantize"][direction] < parts["routed (all)"][direction]
        # the overlap hides part of the all-to-all, never more than all of it
        assert 0.0 <= parts["layer ep exposed"][direction] < parts["ep comm"][direction]
        assert (
            parts["routed (all)"][direction]
            < parts["layer (all)"][direction] + (parts["ep comm"][direction])
        )


def test_report_names_every_stage_of_the_layout(row_174):
    text = breakdown.report(row_174)
    # published: 4096 sequences x 4096 tokens / (3328 tokens/s/GPU x 256 GPUs) = 19.692 s
    assert "dispatcher flex" in text and "published 19.692 s" in text
    stage_lines = [
        line for line in text.splitlines() if line.startswith("  ") and line[2:7].strip().isdigit()
    ]
    assert len(stage_lines) == 8
