"""bench/interleaved_h100.py: the interleaved H100 rows per vpp and sustained GEMM factor
(Nemotron-4 340B rows 421-423 and Llama 3 405B rows 395-396 of ``published-runs-dev.csv``)."""

from __future__ import annotations

import pytest

from costmodel.fitted_rates import SUSTAINED_GEMM_RATE_FACTORS
from tests.bench.bench_loader import load_bench
from tests.bench.validation_cases import dev_rows

bench = load_bench("interleaved_h100")


def _rows(ids: str) -> list[dict[str, str]]:
    return dev_rows(ids)


def test_uniform_bubble_is_the_textbook_one():
    # Narayanan et al. 2021 §2.2: (p - 1)/(v·m) for Megatron's interleaved table, m % p == 0
    for row in bench.uniform_bubble(pp=12, m=48):
        assert row["simulated"] == pytest.approx(11 / (row["vpp"] * 48), rel=1e-12)


def test_line_through_two_runs():
    # t = 1.1 + 0.2·m through m = 48 and m = 36
    intercept, slope = bench.line_through(1.1 + 0.2 * 48, 1.1 + 0.2 * 36, 48, 36)
    assert (intercept, slope) == pytest.approx((1.1, 0.2))


def test_readme_vpp_choices_follow_the_layers_per_stage():
    rows = {r["row_id"]: r for r in _rows("41,43,45")}
    assert bench.readme_vpp_choices(rows["41"]) == dict.fromkeys(
        ("vpp1", "smallest_vpp", "one_layer_chunks"), 1
    )  # pp 1
    assert bench.readme_vpp_choices(rows["43"])["smallest_vpp"] == 23  # 92 layers / pp 4 = 23
    assert bench.readme_vpp_choices(rows["45"]) == {
        "vpp1": 1,
        "smallest_vpp": 2,
        "one_layer_chunks": 12,
    }  # 96 / 8


def test_llama_405b_takes_the_account_for_split_and_the_interleaved_schedule():
    (raw,) = _rows("395")
    case = bench.row_case(raw, 4)
    assert case.plan.vpp == 4 and case.plan.schedule == "interleaved"
    assert case.plan.account_for_embedding_in_pipeline_split
    assert case.plan.account_for_loss_in_pipeline_split


def test_a_lower_factor_slows_the_nemotron_340b_pace():
    (raw,) = _rows("421")
    case = bench.row_case(raw, 2)
    assert bench.predicted_s(case, 0.8) > bench.predicted_s(case, 0.9)
    shipped = SUSTAINED_GEMM_RATE_FACTORS["hopper"]
    assert bench.predicted_s(case, None) == pytest.approx(bench.predicted_s(case, shipped))
