"""bench/validation_docs.py: the FP8 factor and same-recipe lines of docs/validation.md."""

from __future__ import annotations

from tests.bench.bench_loader import load_bench

docs = load_bench("validation_docs")

RESULT = {
    "fitted": {
        "fp8_gemm_rate_factor": 0.65,
        "fp8_gemm_rate_factor_by_generation": {"blackwell": 0.6, "blackwell_ultra": 0.8},
        "fp8_fitted_on_by_generation": {"blackwell": ["1", "2"], "blackwell_ultra": ["3"]},
    },
    "loso": {
        "fp8_gemm_rate_factor_by_left_out_source": {
            "MBRIDGE": {"blackwell": 0.55, "shared": 0.55},
        }
    },
    "same_recipe_ratios": {
        "GB300/GB200": {
            "pairs": 2,
            "median": 1.25,
            "min": 1.2,
            "max": 1.3,
            "predicted_median": 1.0,
        },
        "B300/B200": {"pairs": 1, "median": 1.1, "min": 1.1, "max": 1.1, "predicted_median": None},
    },
}


def test_fp8_line_lists_each_generation_its_rows_and_the_left_out_refits():
    line = docs.fp8_line(RESULT)
    assert "blackwell 0.6 (rows 1, 2)" in line
    assert "blackwell_ultra 0.8 (rows 3)" in line
    assert "shared (one factor on all FP8 rows) 0.65" in line
    assert "MBRIDGE blackwell 0.55, shared 0.55" in line


def test_same_recipe_line_gives_published_and_predicted_ratios():
    line = docs.same_recipe_line(RESULT)
    assert "GB300/GB200 1.25 over 2 recipes (1.20-1.30); 1.00" in line
    assert "B300/B200 1.10 over 1 recipes (1.10-1.10); not priced" in line
