"""bench/validate_published.py: row mapping (`published_rows`, `row_figures`), the SC21
Table 1 group, the search-sanity rank, the rows asked by id (`published_csv`) and the
``--host-launch-us`` flag; rows from `tests.bench.validation_cases`."""

from __future__ import annotations

import csv
import json

import pytest

from costmodel.execution_presets import MEGATRON_2021, MEGATRON_2023
from costmodel.fitted_rates import MOE_HOST_LAUNCH_S
from costmodel.iteration_flops import model_flops_per_iteration, sc21_flops_per_iteration
from tests.bench.bench_loader import load_bench
from tests.bench.validation_cases import ROW_1, SC21_ROW, one_row_csv

rows_mod = load_bench("published_rows")
figures = load_bench("row_figures")
stats = load_bench("validation_stats")
published_csv = load_bench("published_csv")
pricing = load_bench("row_pricing")
report_mod = load_bench("validation_report")
bench = load_bench("validate_published")


def test_sc21_row_maps_to_its_plan_and_2021_options():
    case = rows_mod.case_for_row(SC21_ROW)
    plan = case.plan
    assert (plan.tp, plan.pp, plan.dp, plan.micro_batch_size) == (8, 2, 32, 4)
    assert plan.recompute == "full" and not plan.sequence_parallel
    assert not plan.distributed_optimizer and not plan.overlap_grad_reduce
    assert case.options is MEGATRON_2021
    assert case.profile == "a100-sxm-80gb" and case.generation == "A100"
    assert case.model.activation == "gelu" and case.model.tied_embeddings
    # 1536 sequences x 2048 tokens / (425.1 tokens/s/GPU x 512 GPUs) = 14.45 s
    assert figures.published_iteration_time_s(SC21_ROW, case) == pytest.approx(14.453, rel=1e-3)


def test_stack_version_picks_the_era_options():
    # A row's plan and options follow the stack it names (published-runs-dev.csv columns
    # source_id and source_version), never the row id.
    nemo = SC21_ROW | {
        "source_id": "NEMO-LONGSEQ",
        "source_version": "NeMo 24.03.01.framework container",
        "gpu_type": "H100-SXM5-80GB",
        "precision": "FP8",
    }
    options = rows_mod.case_for_row(nemo).options
    assert options.flash_attention_version == 2 and options.attention == "flash"
    newer = nemo | {"source_version": "NeMo 25.04.rc2 container"}
    assert rows_mod.case_for_row(newer).options.flash_attention_version == 3
    megascale = SC21_ROW | {
        "source_id": "MEGASCALE-T2",
        "source_version": "Megatron-LM commit 285068c8 (baseline)",
    }
    case = rows_mod.case_for_row(megascale)
    assert case.options is MEGATRON_2023
    # No --overlap-grad-reduce in early-2023 Megatron-LM: gradients reduce after the pipeline.
    assert not case.plan.overlap_grad_reduce


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"gpu_type": "L40S"}, "names no chip with a stored profile"),
        ({"precision": "NVFP4"}, "NVFP4 precision on a100-sxm-80gb: no FP4 tensor cores"),
        ({"fsdp_or_zero": "ZeRO-2 (fairscale)"}, "fsdp_or_zero 'ZeRO-2 \\(fairscale\\)'"),
        ({"vpp": "interleaved (degree not stated)"}, "virtual pipeline degree not stated"),
        ({"arch_notes": "alternating sliding-window (128) attention"}, "sliding-window attention"),
    ],
)
def test_unsupported_fields_are_named(changes, reason):
    with pytest.raises(rows_mod.NotExpressible, match=reason):
        rows_mod.case_for_row(SC21_ROW | changes)


def test_tflops_rows_use_the_source_convention():
    case = rows_mod.case_for_row(SC21_ROW)
    row = SC21_ROW | {"derived_tokens_per_sec_per_gpu": ""}
    flops = sc21_flops_per_iteration(case.model, 2048, 1536)
    expected = flops / (138e12 * 512)
    assert figures.published_iteration_time_s(row, case) == pytest.approx(expected)
    noncausal = figures.noncausal_flops_per_iteration(case.model, 2048, 1536)
    causal = model_flops_per_iteration(case.model, 2048, 1536)
    # The causal factor halves the attention core: 3 x 2·s·a·d x layers x tokens.
    extra = 3 * 2 * 2048 * 8192 * 48 * 2048 * 1536
    assert noncausal - causal == pytest.approx(extra)


def test_sc21_table1_group_within_target():
    # The SC21 Table 1 check (Narayanan et al. 2021, arXiv 2104.04473, Table 1; ten rows of
    # published-runs-dev.csv) stays one row group of the bench, median |error| <= 10%.
    path = published_csv.default_csv()
    if path is None:
        pytest.skip("published-runs-dev.csv not found above the repository")
    rows = [r for r in published_csv.read_rows(path) if r["source_id"] == "SC21-T1"][:8]
    outcomes, _, apart = pricing.evaluate(rows)
    assert not apart and len(outcomes) == 8
    assert stats.summary(outcomes)["median_abs_error"] <= report_mod.SC21_TARGET


def test_search_sanity_rank_agrees_with_the_claimed_speedup():
    sanity = load_bench("search_sanity")
    tie_tolerance = load_bench("sanity_claims").TIE_TOLERANCE
    row = ROW_1
    result = sanity.sanity_row(row)
    for prefix in ("", "same_recompute_"):
        speedup = result[f"{prefix}claimed_speedup" if not prefix else f"{prefix}speedup"]
        rank = result[f"{prefix}recipe_rank" if not prefix else f"{prefix}rank"]
        assert 1 <= rank <= sanity.TOP_K + 1
        # within the tie band a plan does not outrank the recipe; beyond it, it still does;
        # the plain rank is the recipe's place in the planner's order, where every plan
        # beyond the band precedes it
        tied = result[
            f"{prefix}recipe_rank_within_error" if not prefix else f"{prefix}rank_within_error"
        ]
        assert 1 <= tied <= rank
        assert (tied == 1) == (speedup <= 1.0 + tie_tolerance)
    assert "rc-full" in result["same_recompute_pick"]
    assert 0.0 < result["pick_memory_free"] < 1.0
    # The breakdowns are the estimates' phases: iteration seconds in the speedup's ratio
    # (one global batch for both), and recompute only where the plan recomputes.
    recipe_s = sum(result["recipe_breakdown"].values())
    pick_s = sum(result["pick_breakdown"].values())
    assert recipe_s / pick_s == pytest.approx(result["claimed_speedup"], rel=1e-9)
    held_s = sum(result["same_recompute_breakdown"].values())
    assert recipe_s / held_s == pytest.approx(result["same_recompute_speedup"], rel=1e-9)
    assert result["same_recompute_breakdown"]["compute_recompute"] > 0
    assert ("rc-" in result["pick"]) == (result["pick_breakdown"]["compute_recompute"] > 0)


def test_llama3_70b_megatron_fsdp_offload_recipe_fits_gb200():
    # published-runs-dev.csv row 351: Megatron-Bridge 25.09 Llama 3 70B FP8 current scaling
    # on 64 GB200, Megatron-FSDP optim_grads_params, 40 of 80 layers' activations offloaded
    # (scripts/performance/configs/llama3/llama3_70b_llm_pretrain.yaml, gb200 fp8_cs, tag
    # v0.1.0rc4). The run completed, so the recipe fits the device.
    path = published_csv.default_csv()
    if path is None:
        pytest.skip("published-runs-dev.csv not found above the repository")
    raw = next(r for r in published_csv.read_rows(path) if r["row_id"] == "351")
    outcome, case = pricing.evaluate_row(raw)
    assert case.plan.use_megatron_fsdp and case.plan.cpu_offloading_num_layers == 40
    assert outcome.fits


def test_host_launch_flag_prices_a_host_bound_moe_row_at_the_given_time(capsys):
    # published-runs-dev.csv row 183 (Megatron-Bridge 26.04.01, Qwen3 30B-A3B on 8 B200,
    # micro-batch 4, EP 8): its MoE layers' host floor binds at the shipped launch time.
    def predicted_s(*extra: str) -> float:
        assert bench.main(["--no-fit", "--json", "--rows", "183", *extra]) == 0
        (row,) = json.loads(capsys.readouterr().out)["rows"]
        assert row["row_id"] == "183" and row["kind"] == "moe"
        return row["predicted_s"]

    shipped = predicted_s()
    assert predicted_s("--host-launch-us", str(MOE_HOST_LAUNCH_S * 1e6)) == pytest.approx(shipped)
    assert predicted_s("--host-launch-us", "0") < shipped


def test_rows_by_ids_keeps_the_order_asked_and_names_missing_ids():
    rows, error = published_csv.rows_by_ids("17, 1")
    assert error is None
    assert [r["row_id"] for r in rows] == ["17", "1"]
    rows, error = published_csv.rows_by_ids("1,no-such-row")
    assert rows == [] and "no-such-row" in error


def test_a_run_without_two_strategies_of_one_group_prints_no_kendall_figure(tmp_path, capsys):
    one = one_row_csv(tmp_path, "1")
    assert bench.main(["--no-fit", "--csv", str(one)]) == 0
    out = capsys.readouterr().out
    assert "Kendall tau n/a (no group of two strategies)" in out
    assert "nan" not in out


def _without_columns(path, tmp_path, drop: tuple[str, ...]):
    """A copy of the CSV at ``path`` without the columns ``drop``."""
    with path.open(newline="") as handle:
        rows = list(csv.reader(handle))
    keep = [i for i, c in enumerate(rows[0]) if c not in drop]
    cut = tmp_path / "cut.csv"
    with cut.open("w", newline="") as handle:
        csv.writer(handle).writerows([[r[i] for i in keep] for r in rows])
    return cut


def test_a_csv_without_a_column_every_row_is_read_by_is_refused_by_name(tmp_path, capsys):
    cut = _without_columns(one_row_csv(tmp_path, "1"), tmp_path, ("gpu_type",))
    assert bench.main(["--no-fit", "--csv", str(cut)]) == 2
    assert "lacks the columns gpu_type" in capsys.readouterr().err


def test_a_csv_without_trust_needs_the_level_named(tmp_path, capsys):
    one = one_row_csv(tmp_path, "1")
    cut = _without_columns(one, tmp_path, ("trust",))
    assert bench.main(["--no-fit", "--csv", str(cut)]) == 2
    assert "pass --trust A, B or C" in capsys.readouterr().err
    assert bench.main(["--no-fit", "--csv", str(one), "--trust", "A"]) == 2
    assert "has a trust column" in capsys.readouterr().err


def test_a_csv_with_only_source_and_no_trust_prices_as_the_dev_set(tmp_path, capsys):
    """SC21 Table 1's row 1 without ``source_id`` and ``trust`` (the columns of
    ``published-runs-public.csv``), given trust A, prices as the dev set's row does, under
    the source id its ``source`` text gives."""
    one = one_row_csv(tmp_path, "1")
    assert bench.main(["--no-fit", "--json", "--csv", str(one)]) == 0
    (dev,) = json.loads(capsys.readouterr().out)["rows"]
    cut = _without_columns(one, tmp_path, ("source_id", "trust"))
    assert bench.main(["--no-fit", "--json", "--csv", str(cut), "--trust", "A"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["source_id"] == "NARAYANAN2021-T1"
    assert row["predicted_s"] == dev["predicted_s"]
    assert row["published_s"] == dev["published_s"]
    assert bench.main(["--no-fit", "--json", "--csv", str(cut), "--trust", "C"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["rows"] == [] and [r["row_id"] for r in result["trust_c"]] == ["1"]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("Narayanan et al. 2021, 'Efficient Large-Scale ...' (SC21), Table 2", "NARAYANAN2021-T2"),
        ("Megatron-Bridge 26.04 performance summary", "MEGATRON"),
        ("Jiang et al. (MegaScale, NSDI 2024)", "JIANG2024"),
        ("", "SOURCE"),
    ],
)
def test_derived_source_id_keeps_the_family_before_the_dash(source, expected):
    assert published_csv.derived_source_id(source) == expected
