"""bench/validation_docs.py and bench/validation_tables.py: the FP8 factor, same-recipe and
fit-note lines and the search sanity's claim lines of docs/validation.md."""

from __future__ import annotations

from tests.bench.bench_loader import load_bench

docs = load_bench("validation_docs")
tables = load_bench("validation_tables")

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
    assert "shared (one factor on all dense FP8 rows) 0.65" in line
    assert "MBRIDGE blackwell 0.55, shared 0.55" in line


def test_same_recipe_line_gives_published_and_predicted_ratios():
    line = docs.same_recipe_line(RESULT)
    assert "GB300/GB200 1.25 over 2 recipes (1.20-1.30); 1.00" in line
    assert "B300/B200 1.10 over 1 recipes (1.10-1.10); not priced" in line


def test_claim_lines_name_the_phases_and_the_overflow_share_of_recipes_behind_the_list():
    gains = {"compute_recompute": 0.25, "tp_exposed": 0.01, "bubble": -0.02, "pp_exposed": 0.0}
    row = {
        "row_id": "1",
        "model": "GPT 1.7B",
        "claimed_speedup": 1.30,
        "recipe_rank": 11,
        "pick_gain_by_phase": gains,
        "pick_overflow_fragmentation": 0.65,
        "assumed_fragmentation": 0.36,
    }
    ranked = row | {"row_id": "9", "recipe_rank": 1}
    older = {k: v for k, v in row.items() if k != "pick_gain_by_phase"} | {"row_id": "5"}
    lines = tables.claim_lines({"rows": [row, ranked, older]})
    assert lines == [
        "- row 1 (GPT 1.7B, 1.30x): compute_recompute +25.0%, bubble -2.0%, tp_exposed +1.0%; "
        "stops fitting above 65% fragmentation (36% assumed)"
    ]


def test_fit_notes_read_the_refits_and_the_zoo_rows_from_the_result():
    result = {
        "fitted": RESULT["fitted"]
        | {
            "moe_host_launch_s": 60e-6,
            "moe_expert_launch_s": 10e-6,
            "moe_token_device_s": 200e-9,
            "sustained_gemm_rate_factor_by_generation": {},
        },
        "loso": RESULT["loso"]
        | {
            "moe_host_launch_s_by_left_out_source": {"MBRIDGE": 45e-6},
            "moe_expert_launch_s_by_left_out_source": {"MBRIDGE": 5e-6},
            "moe_token_device_s_by_left_out_source": {"MBRIDGE": 125e-9},
            "by_source": {"MEGASCALE-T2": {"signed_median_error": -0.146}},
        },
        "rows": [{"row_id": "391", "error": -0.201}, {"row_id": "393", "error": -0.323}],
    }
    text = "\n".join(docs._fit_notes(result))
    assert "shared factor of the remaining dense FP8 rows (0.55, against 0.6 and 0.8" in text
    assert "host-launch time to 45 us (60 in sample)" in text
    assert "issues per local expert to 5 us (10 in sample)" in text
    assert "device time per token to 125 ns (200 in sample)" in text
    assert "-20% (row 391), -32% (row 393) with it" in text
    assert "are 15% too fast (median)" in text
    no_bridge = result | {"loso": result["loso"] | {"moe_host_launch_s_by_left_out_source": {}}}
    assert "Leave-one-source-out" not in "\n".join(docs._fit_notes(no_bridge))


def test_memory_note_names_every_row_that_does_not_fit():
    printed = {"printed_not_recipe": "printed micro-batch 2; the recipe runs 1"}
    three = [{"row_id": r} | printed for r in ("248", "250", "352")]
    line = docs.memory_note({"not_fitting": three, "fit_fraction_as_run": 1.0})
    assert "except rows 248, 250 and 352" in line
    assert "100% of the rows fit" in line
    one = docs.memory_note({"not_fitting": three[:1], "fit_fraction_as_run": 0.99})
    assert "except row 248," in one and "99% of the rows fit" in one
    # A row that does not fit as printed and prints its recipe is named as not fitting.
    plain = docs.memory_note({"not_fitting": [{"row_id": "7"}], "fit_fraction_as_run": 0.9})
    assert plain == "- Memory: row 7 is predicted not to fit (`not_fitting`)."
    assert "every row is predicted to fit" in docs.memory_note({"not_fitting": []})
