"""bench/moe_host_share.py: a published MoE row's prediction with and without the host-launch
floor. Rows of ``published-runs-dev.csv``: 367 (Qwen3 30B-A3B, NeMo 25.09 on B200, micro-batch
1, the whole layer captured in CUDA graphs: `bench/moe_recipes.py`) and 308 (the same model,
NeMo 26.02 on GB200, micro-batch 4, experts run eagerly)."""

from __future__ import annotations

import pytest

from tests.bench.bench_loader import load_bench
from tests.bench.validation_cases import dev_rows

share = load_bench("moe_host_share")


@pytest.fixture(scope="module")
def rows() -> dict[str, dict[str, str]]:
    return {r["row_id"]: r for r in dev_rows("308,367")}


def test_a_layer_captured_whole_has_no_floor(rows):
    s = share.host_share(rows["367"])
    assert s.no_floor_s == pytest.approx(s.predicted_s, rel=1e-12)
    assert s.floor_share == pytest.approx(0.0, abs=1e-12)
    # Only the fitted device time per token separates it from the device-only prediction.
    assert s.device_only_s < s.predicted_s


def test_eager_experts_carry_a_floor_the_device_only_prediction_drops(rows):
    s = share.host_share(rows["308"])
    assert 0.0 < s.device_only_s < s.no_floor_s < s.predicted_s
    assert 0.0 < s.floor_share < 1.0
    # 512 sequences / (mbs 4 x dp 8) = 16 microbatches of 4096 x 4 tokens, 48 layers, one stage
    assert (s.microbatches, s.tokens_per_microbatch, s.stage_layers) == (16, 16384, 48)
    per_token = (s.published_s - s.device_only_s) / (16 * 16384 * 48) * 1e9
    assert s.unexplained_ns_per_token_layer == pytest.approx(per_token)


def test_report_prints_one_line_per_row(rows):
    text = share.report([share.host_share(rows[r]) for r in ("367", "308")])
    lines = text.splitlines()
    assert len(lines) == 3
    assert lines[1].split()[0] == "367" and lines[2].split()[0] == "308"
    # published: 512 sequences x 4096 tokens / (26084 tokens/s/GPU x 8 GPUs) = 10.050 s
    assert "10.050" in lines[2]
