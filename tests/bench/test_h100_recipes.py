"""bench/h100_recipes.py: Megatron-Bridge's H100 recipes priced through the bench's row path."""

from __future__ import annotations

import pytest

from tests.bench.bench_loader import load_bench

bench = load_bench("h100_recipes")
table = load_bench("h100_recipe_table")
schema = load_bench("h100_recipe_schema")


def _bases() -> dict[str, dict[str, str]]:
    rows, error = bench.rows_by_ids(",".join(bench.MODEL_ROWS.values()))
    if error is not None:
        pytest.skip(error)
    return dict(zip(bench.MODEL_ROWS, rows, strict=True))


def test_recipe_keys_are_unique_and_releases_known():
    keys = [r.key for r in table.RECIPES]
    assert len(keys) == len(set(keys))
    for recipe in table.RECIPES:
        assert set(recipe.releases) <= set(schema.RELEASE_TAGS), recipe.key
        assert recipe.model in bench.MODEL_ROWS, recipe.key


def test_recipes_fill_their_gpus():
    for r in table.RECIPES:
        model_parallel = r.tp * r.pp * r.cp
        assert r.num_gpus % model_parallel == 0, r.key
        dp = r.num_gpus // model_parallel
        assert r.global_batch_size % (r.micro_batch_size * dp) == 0, r.key


def test_row_prints_the_table_columns():
    bases = _bases()
    recipe = next(r for r in table.RECIPES if r.key == "qwen3-30b-a3b-fp8cs-25.09")
    row = bench.recipe_row(recipe, "25.09", bases[recipe.model])
    assert row["model"] == "Qwen3_30B_a3B (tokendrop)"
    assert row["precision"].startswith("not stated")
    assert (row["pp"], row["vpp"], row["ep"], row["micro_batch_size"]) == ("2", "12", "8", "2")
    assert row["tokens_per_sec_per_gpu"] == "" and row["tflops_per_gpu"] == ""


@pytest.fixture(scope="module")
def report() -> dict[str, object]:
    _bases()
    return bench.h100_report()


def test_every_priced_recipe_fits_with_its_full_settings(report):
    unpriced = [e["key"] for e in report["recipes"] if "row" not in e]
    assert not unpriced
    not_fitting = [(e["key"], e["release"]) for e in report["recipes"] if not e["recipe"]["fits"]]
    assert not not_fitting


def test_row_path_meets_the_recipes_settings(report):
    left = {
        (e["key"], e["release"]): e["differences"] for e in report["recipes"] if e["differences"]
    }
    assert not left


def test_qwen3_30b_ratio_is_per_token_at_one_precision(report):
    ratios = report["qwen3_30b_ratio"]
    assert {(r["precision"], r["old_release"]) for r in ratios} == {
        (p, release) for p in ("bf16", "fp8cs") for release in ("25.09", "25.11", "26.02")
    }
    assert all(r["row"] > 0 and r["recipe"] > 0 for r in ratios)


def test_thirty_two_stage_layout_only_on_h100():
    pipeline = load_bench("pipeline_recipes")
    assert pipeline.layout_for(61, 32, 1, "H100") == "Et|(tt|)*30mL"
    assert pipeline.layout_for(61, 32, 0, "H100") == "Et|(tt|)*30L"
    with pytest.raises(pipeline.NotExpressible):
        pipeline.layout_for(61, 32, 0, "GB200 (NVL72)")


HYBRID_KEYS = {
    "nemotron-3-nano-bf16",
    "nemotron-3-nano-fp8cs",
    "nemotron-3-nano-fp8cs-head",
    "nemotron-h-56b-fp8cs",
    "nemotron-3-super-bf16-head",
}


def test_hybrid_rows_print_their_expert_parallel_size_and_take_the_preset():
    bases = _bases()
    recipe = next(r for r in table.RECIPES if r.key == "nemotron-3-nano-fp8cs-head")
    row = bench.recipe_row(recipe, "26.08", bases[recipe.model])
    # The Nano base row prints no num_experts; the recipe's ep 16 is printed all the same.
    assert (row["model"], row["tp"], row["ep"], row["precision"]) == (
        "Nemotron_3_Nano",
        "1",
        "16",
        "FP8",
    )
    case = bench.case_for_row(row)
    assert case.model.is_hybrid and case.plan.ep == 16


def test_hybrid_recipes_price_fit_and_meet_the_row_path(report):
    hybrid = [e for e in report["recipes"] if e["key"] in HYBRID_KEYS]
    # Nano: bf16 at 26.04, 26.06, 26.08; fp8cs at 26.04, 26.06; fp8cs-head at 26.08.
    # Nemotron-H 56B: 25.11, 26.02, 26.04, 26.06, 26.08; Nemotron 3 Super: 26.08.
    assert len(hybrid) == 12
    assert all(e["recipe"]["fits"] and e["row"]["fits"] and not e["differences"] for e in hybrid)
    nano_tp = {r.tp for r in table.RECIPES if r.model == "Nemotron_3_Nano"}
    assert nano_tp == {1}  # within the 2 query groups (query_groups_divisible_by_tp)
    names = {n["model"] for n in report["not_expressible"]}
    assert not names & {"Nemotron 3 Nano", "Nemotron-H 56B", "Nemotron 3 Super"}
    # HEAD's H100 Super config: capacity 1.10 padded, the precision-aware optimizer
    super_head = next(e for e in hybrid if e["key"] == "nemotron-3-super-bf16-head")
    assert super_head["plan"].startswith("tp1 pp2 ep32 dp32 mbs1")
