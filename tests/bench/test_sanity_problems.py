"""bench/sanity_problems.py and the search sanity's grouping: which rows are one problem,
which are one recipe, and that each problem is searched once."""

from __future__ import annotations

import pytest

from specs.errors import SpecError
from tests.bench.bench_loader import load_bench
from tests.bench.published_row_cases import DEEPSEEK_GB200
from tests.bench.validation_cases import ROW_1

problems = load_bench("sanity_problems")
sanity = load_bench("search_sanity")
cases = load_bench("sanity_cases")

# Row 1 as a trust B row published again under another model name: the same problem and
# plan, so the same recipe.
ROW_1_AGAIN = ROW_1 | {"row_id": "901", "trust": "B", "model": "GPT 1.7B (rerun)"}
# The same problem with another plan (micro-batch 8): a second recipe of the problem.
ROW_1_MBS8 = ROW_1 | {"row_id": "902", "trust": "B", "micro_batch_size": "8"}
# Another global batch: another problem.
ROW_1_GBS256 = ROW_1 | {
    "row_id": "903",
    "trust": "B",
    "global_batch_size": "256",
    "micro_batch_size": "8",
}
# Trust C and an incomplete trust B row.
ROW_1_C = ROW_1 | {"row_id": "904", "trust": "C"}
NO_VOCAB = ROW_1 | {"row_id": "905", "trust": "B", "vocab_size": ""}
MOE_B = DEEPSEEK_GB200 | {"trust": "B"}

ROWS = [ROW_1, ROW_1_AGAIN, ROW_1_MBS8, ROW_1_GBS256, ROW_1_C, NO_VOCAB, MOE_B]


def test_rows_of_one_problem_and_plan_are_one_recipe():
    recipes, apart = problems.recipes_of(ROWS, ("A", "B"), "dense")
    assert [r.row_ids for r in recipes] == [("1", "901"), ("902",), ("903",)]
    assert [r.problem for r in recipes] == [0, 0, 1]
    assert apart == [{"row_id": "905", "reason": "vocab_size not stated"}]
    assert recipes[0].case.plan != recipes[1].case.plan
    assert problems.problem_key(recipes[0].case) == problems.problem_key(recipes[1].case)


def test_rows_are_selected_by_trust_and_kind():
    def ids(trusts, kind):
        return [r.row_ids for r in problems.recipes_of(ROWS, trusts, kind)[0]]

    assert ids(("A",), "all") == [("1",)]
    assert ids(("C",), "all") == [("904",)]
    assert ids(("B",), "moe") == [("103",)]
    assert [r.kind for r in problems.recipes_of(ROWS, ("A", "B"), "all")[0]] == [
        "dense",
        "dense",
        "dense",
        "moe",
    ]
    with pytest.raises(SpecError, match="kind"):
        problems.recipes_of(ROWS, ("A",), "sparse")


def test_options_of_the_row_separate_problems():
    # Same shape and plan, but a Megatron-Bridge release prices it with its own options
    # (bf16 main gradients, TE cross entropy): another problem.
    bridge = ROW_1 | {"row_id": "906", "trust": "B", "source_id": "MBRIDGE-26.06"}
    recipes, _ = problems.recipes_of([ROW_1, bridge], ("A", "B"))
    assert [r.problem for r in recipes] == [0, 1]


def test_trusts_and_limit_parse_and_check():
    assert problems.parse_trusts("a, B") == ("A", "B")
    for text in ("", "A,D"):
        with pytest.raises(SpecError, match="--trust"):
            problems.parse_trusts(text)
    recipes, _ = problems.recipes_of(ROWS, ("A", "B"), "dense")
    assert [r.row_ids for r in problems.first_problems(recipes, 1)] == [("1", "901"), ("902",)]
    assert problems.first_problems(recipes, None) == recipes
    with pytest.raises(SpecError, match="--limit"):
        problems.first_problems(recipes, 0)


def test_summaries_group_by_trust_kind_generation_and_profile():
    def result(kind, generation, hardware, speedup, rank):
        return {
            "trust": "A" if generation == "A100" else "B",
            "kind": kind,
            "generation": generation,
            "hardware": hardware,
            "claimed_speedup": speedup,
            "recipe_rank": rank,
            "recipe_rank_within_error": 1,
            "same_recompute_speedup": 1.0,
            "same_recompute_rank": 1,
            "same_recompute_rank_within_error": 1,
        }

    results = [
        result("dense", "Blackwell", "b200", 1.0, 1),
        result("moe", "Blackwell", "b200", 1.5, 11),
        result("moe", "Blackwell", "gb200-nvl72", 1.3, 11),
        result("dense", "A100", "a100-sxm-80gb", 1.1, 4),
    ]
    groups = problems.summaries(results, top_k=10)
    assert groups["kind=moe"]["median_claimed_speedup"] == pytest.approx(1.4)
    assert groups["kind=moe"]["recipe_in_top10_fraction"] == 0
    assert groups["generation=Blackwell"]["num_recipes"] == 3
    assert groups["hardware=b200"]["recipe_in_top10_fraction"] == 0.5
    assert groups["A: dense, A100"]["median_claimed_speedup"] == pytest.approx(1.1)
    assert groups["trust=B"]["num_recipes"] == 3
    assert problems.summary([], top_k=10)["median_claimed_speedup"] is None


def test_each_problem_is_searched_once(monkeypatch):
    # Rows 1 and 901 are one recipe, 902 another recipe of its problem, 903 another
    # problem: two problems, each searched over the whole space and held to full
    # recompute (every recipe's setting), 4 searches in place of 6.
    calls = []
    real = sanity.search_plans

    def counted(model, cluster, job, *args, **kwargs):
        calls.append(job.global_batch_size)
        return real(model, cluster, job, *args, **kwargs)

    monkeypatch.setattr(sanity, "search_plans", counted)
    result = sanity.search_sanity(ROWS, trusts=("A", "B"), kind="dense")
    assert sorted(calls) == [256, 256, 512, 512]
    assert result["num_problems"] == 2 and result["num_searches"] == 4
    rows = result["rows"]
    assert [r["row_ids"] for r in rows] == [["1", "901"], ["902"], ["903"]]
    # one search, one pick, each recipe ranked against it
    assert rows[0]["pick"] == rows[1]["pick"]
    assert rows[0]["recipe"] != rows[1]["recipe"]
    speedups = [r["claimed_speedup"] for r in rows[:2]]
    assert speedups[0] != pytest.approx(speedups[1])
    assert result["num_recipes"] == 3
    assert result["by_group"]["kind=dense"]["num_recipes"] == 3
    assert result["not_run"] == [{"row_id": "905", "reason": "vocab_size not stated"}]


def test_search_may_use_the_features_its_recipe_runs():
    # Row 1 (SC21, Megatron-LM 2021: no plan feature) uses none beyond its options, its
    # PyTorch DDP bucket not counted: searched as priced. The same row with ZeRO-1 and an
    # embedding-aware split (BLOOM's Megatron-DeepSpeed, row 430) widens the search by both.
    case = load_bench("published_rows").case_for_row(ROW_1)
    assert case.plan.ddp_bucket_size is not None
    assert cases.searched_case(case) is case
    plan = case.plan.__class__.for_world(
        32, distributed_optimizer=True, account_for_embedding_in_pipeline_split=True, pp=2
    )
    zero1 = cases.searched_case(case.__class__(**{**_fields(case), "plan": plan}))
    assert zero1.options.plan_features - case.options.plan_features == {
        "distributed_optimizer",
        "uneven_pipeline_split",
    }
    assert cases.recipe_features(plan) == {"distributed_optimizer", "uneven_pipeline_split"}


def _fields(case):
    return {name: getattr(case, name) for name in case.__slots__}
