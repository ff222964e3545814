"""The GPU generations `costmodel.fitted_rates` names as fitted are those of the dev-set rows
that fit each figure under bench/validation_fit.py's rules: the FP8 factors' keys are the
generations with dense FP8 rows, the NVFP4 factors' those with dense NVFP4 rows, the
sustained 16-bit factors' keys those with dense bf16/fp16 rows whose options leave that
factor to the default, and `MOE_FIT_GENERATIONS` those of the MoE rows (every trust A/B row
the specs express)."""

from __future__ import annotations

import pytest

from costmodel.fitted_rates import (
    FP4_GEMM_RATE_FACTORS,
    FP8_GEMM_RATE_FACTORS,
    MOE_FIT_GENERATIONS,
    SUSTAINED_GEMM_RATE_FACTORS,
)
from profiles.store import load_profile
from specs.errors import SpecError
from tests.bench.bench_loader import load_bench

published_csv = load_bench("published_csv")
published_rows = load_bench("published_rows")
row_pricing = load_bench("row_pricing")


def _expressed_cases():
    path = published_csv.default_csv()
    if path is None:
        pytest.skip("published-runs-dev.csv not found")
    cases = []
    for raw in published_csv.read_rows(path):
        if raw["trust"] not in row_pricing.TRUSTED:
            continue
        try:
            cases.append(published_rows.case_for_row(raw))
        except (published_rows.NotExpressible, SpecError):
            continue
    return cases


def test_the_fitted_generations_are_those_of_the_rows_that_fit_them():
    fp8, fp4, sixteen, moe = set(), set(), set(), set()
    for case in _expressed_cases():
        generation = load_profile(case.profile).device.generation
        if case.model.num_experts:
            moe.add(generation)
        elif case.job.precision == "fp8":
            fp8.add(generation)
        elif case.job.precision == "nvfp4":
            fp4.add(generation)
        elif case.options.sustained_gemm_rate_factor is None:
            sixteen.add(generation)
    assert set(FP8_GEMM_RATE_FACTORS) == fp8
    assert set(FP4_GEMM_RATE_FACTORS) == fp4
    assert set(SUSTAINED_GEMM_RATE_FACTORS) == sixteen
    assert set(MOE_FIT_GENERATIONS) == moe
