"""bench/validate_published.py: row mapping, statistics, and the SC21 Table 1 group."""

from __future__ import annotations

import dataclasses
import json

import pytest

from costmodel.execution_presets import MEGATRON_2021, MEGATRON_2023
from costmodel.fitted_rates import MOE_HOST_LAUNCH_S
from costmodel.flops import model_flops_per_iteration, sc21_flops_per_iteration
from tests.bench.bench_loader import load_bench

rows_mod = load_bench("published_rows")
figures = load_bench("row_figures")
stats = load_bench("validation_stats")
fitting = load_bench("validation_fit")
published_csv = load_bench("published_csv")
pricing = load_bench("row_pricing")
report_mod = load_bench("validation_report")
bench = load_bench("validate_published")

SC21_ROW = {
    # published-runs-dev.csv row 5 (SC21 Table 1, GPT 39.1B), the columns the mapping reads.
    "row_id": "5",
    "source_id": "SC21-T1",
    "source": "Narayanan et al. 2021, (SC21, arXiv 2104.04473), Table 1",
    "source_version": "Megatron-LM commit 6985e589, container nvcr.io/nvidia/pytorch:20.12-py3",
    "trust": "A",
    "model": "GPT 39.1B",
    "arch_notes": "GPT-2/3-style decoder, GeLU MLP, ffn=4h, learned pos-emb, tied embeddings",
    "num_layers": "48",
    "hidden_size": "8192",
    "num_attention_heads": "64",
    "num_query_groups": "64",
    "ffn_hidden_size": "32768",
    "vocab_size": "51200",
    "seq_length": "2048",
    "gpu_type": "A100-SXM4-80GB",
    "num_gpus": "512",
    "tp": "8",
    "pp": "2",
    "vpp": "1",
    "cp": "1",
    "dp": "32",
    "fsdp_or_zero": "none (plain DP; DDP impl=local)",
    "micro_batch_size": "4",
    "global_batch_size": "1536",
    "recompute": "full, every layer (--activations-checkpoint-method uniform)",
    "sequence_parallel": "no (did not exist)",
    "precision": "fp16 mixed (--fp16, static loss-scale 8192)",
    "tflops_per_gpu": "138",
    "flops_convention": "Eq.3: F = 96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h)) per iteration",
    "iteration_time_s": "",
    "tokens_per_sec_per_gpu": "",
    "derived_tokens_per_sec_per_gpu": "425.1",
}

ROW_1 = SC21_ROW | {
    # published-runs-dev.csv row 1 (SC21 Table 1, GPT 1.7B on 32 GPUs, torch DDP)
    "row_id": "1",
    "model": "GPT 1.7B",
    "num_layers": "24",
    "hidden_size": "2304",
    "num_attention_heads": "24",
    "num_query_groups": "24",
    "ffn_hidden_size": "9216",
    "num_gpus": "32",
    "tp": "1",
    "pp": "1",
    "fsdp_or_zero": "none (plain DP; DDP impl=torch)",
    "micro_batch_size": "16",
    "global_batch_size": "512",
}


def _outcome(
    row_id,
    source,
    published,
    predicted,
    generation="H100/H800",
    model="m",
    gpus=8,
    plan=None,
    gbs=None,
    precision_text="",
):
    return stats.Outcome(
        row_id=row_id,
        source_id=source,
        model=model,
        plan=f"plan {row_id}" if plan is None else plan,
        generation=generation,
        precision="bf16",
        kind="dense",
        gpu_type="H100",
        num_gpus=gpus,
        seq_length=4096,
        published_s=published,
        predicted_s=predicted,
        peak_memory_gib=10.0,
        device_memory_gib=80.0,
        fits=True,
        global_batch_size=gbs,
        precision_text=precision_text,
    )


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
        ({"gpu_type": "H800"}, "no stored profile for H800"),
        ({"precision": "NVFP4"}, "NVFP4 precision"),
        ({"fsdp_or_zero": "ZeRO-2 (fairscale)"}, "optimizer sharding"),
        ({"vpp": "interleaved (degree not stated)"}, "virtual pipeline degree not stated"),
        ({"arch_notes": "alternating sliding-window (128) attention"}, "sliding-window attention"),
    ],
)
def test_unsupported_fields_are_named(changes, reason):
    with pytest.raises(rows_mod.NotExpressible, match=reason):
        rows_mod.case_for_row(SC21_ROW | changes)


def test_precision_mapping():
    assert rows_mod.precision_for("MXFP8") == "fp8"
    assert rows_mod.precision_for("FP8-CS") == "fp8"
    assert rows_mod.precision_for("BF16") == "bf16"
    assert rows_mod.precision_for("fp16 mixed") == "bf16"


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


def test_quantile_matches_linear_interpolation():
    values = [0.1, 0.4, 0.2, 0.3]
    assert stats.quantile(values, 0.5) == pytest.approx(0.25)
    assert stats.quantile(values, 0.9) == pytest.approx(0.37)
    assert stats.quantile([0.5], 0.9) == 0.5


def test_summary_figures():
    outcomes = [_outcome(str(i), "S", 1.0, p) for i, p in enumerate([0.8, 1.1, 1.3])]
    result = stats.summary(outcomes)
    assert result["median_abs_error"] == pytest.approx(0.2)
    assert result["signed_median_error"] == pytest.approx(0.1)
    assert result["fit_fraction"] == 1.0


def test_kendall_tau_counts_pairs_inside_groups():
    same = [
        _outcome("1", "S", 1.0, 1.0),
        _outcome("2", "S", 2.0, 2.5),
        _outcome("3", "S", 3.0, 2.0),
    ]
    # pairs (1,2) and (1,3) concordant, (2,3) discordant: tau = (2 - 1) / 3
    other = [_outcome("4", "S", 1.0, 5.0, model="n")]
    result = stats.kendall_tau(same + other)
    assert result["kendall_tau"] == pytest.approx(1 / 3)
    assert result["pairs"] == 3
    assert list(result["groups"]) == [stats.strategy_key(same[0])]


def test_strategy_groups_split_release_and_printed_precision():
    # Each row differs from the first in source release or printed FP8 recipe only, and is
    # ordered against it the wrong way: no group holds two strategies.
    base = _outcome("1", "MBRIDGE-26.04", 1.0, 2.0)
    others = [
        _outcome("2", "MBRIDGE-26.06", 2.0, 1.0),
        _outcome("4", "MBRIDGE-26.04", 2.0, 1.0, precision_text="MXFP8"),
    ]
    result = stats.kendall_tau([base, *others])
    assert result["pairs"] == 0 and result["groups"] == {}
    assert len({stats.strategy_key(o) for o in [base, *others]}) == 3


def test_gpu_count_is_a_strategy_within_a_group():
    # The same model at two data-parallel sizes (MegaScale's and SC21's Table 2 groups):
    # one group, two strategies compared by tokens/s per GPU.
    small = _outcome("1", "MBRIDGE-26.04", 1.0, 2.0)
    large = _outcome("3", "MBRIDGE-26.04", 2.0, 1.0, gpus=16)
    assert stats.strategy_key(small) == stats.strategy_key(large)
    assert stats.strategy_of(small) != stats.strategy_of(large)
    assert stats.kendall_tau([small, large])["pairs"] == 1


def test_identical_strategies_are_one_averaged_strategy():
    # Plan "a" published twice (1 s and 3 s: mean rate (1 + 1/3) / 2 = 2/3 of 1 s), plan "b"
    # once at 1.2 s (rate 5/6): b is faster on the published average, slower predicted.
    rows = [
        _outcome("1", "S", 1.0, 1.0, plan="a"),
        _outcome("2", "S", 3.0, 1.0, plan="a"),
        _outcome("3", "S", 1.2, 2.0, plan="b"),
    ]
    result = stats.kendall_tau(rows)
    assert result["pairs"] == 1
    assert result["kendall_tau"] == pytest.approx(-1.0)
    rates = stats.strategy_rates(rows)
    tokens = 4096 / 8  # one sequence of 4096 tokens per iteration, 8 GPUs
    assert rates["8 GPUs | a | gbs None"][0] == pytest.approx(tokens * 2 / 3)
    assert rates["8 GPUs | b | gbs None"][0] == pytest.approx(tokens / 1.2)


def test_global_batch_enters_the_throughput():
    # Same plan at 2 and 1 sequences per iteration: 1.5 s vs 1 s published (4/3 vs 1
    # sequence per second), 1.9 s vs 1 s predicted (1.05 vs 1): the same order.
    rows = [
        _outcome("1", "S", 1.5, 1.9, plan="a", gbs=2),
        _outcome("2", "S", 1.0, 1.0, plan="a", gbs=1),
    ]
    result = stats.kendall_tau(rows)
    assert result["pairs"] == 1 and result["kendall_tau"] == pytest.approx(1.0)


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
        assert (tied == 1) == (speedup <= 1.0 + sanity.TIE_TOLERANCE)
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


# Synthetic rows for the fits: a row's predicted seconds are max(c + w / f, n * h) at FP8
# factor f and host-launch time h (GPU time with its fp8 GEMM part w slowed by 1 / f, and a
# host floor of n launches), published seconds those of known (f, h): the fit must recover
# them. A grid holds them exactly.
GRID = fitting.FitGrid(
    fp8_factors=tuple(round(1.0 - 0.05 * i, 2) for i in range(13)),
    host_launch_s=tuple(round(5e-6 * i, 6) for i in range(13)),
)


def _shape(c, w, n=0.0):
    return lambda f, h: max(c + w / (1.0 if f is None else f), n * h)


def _predictor(shapes, calls=None):
    # These rows have no 16-bit GEMM part: the sustained factor does not move them.
    def predict(row_id, factor, host_s, sustained=None):
        if calls is not None:
            calls.append(row_id)
        return shapes[row_id](factor, host_s)

    return predict


def _row(row_id, source, shape, truth, *, generation="H100/H800", kind="dense", fp8=True):
    return dataclasses.replace(
        _outcome(row_id, source, shape(*truth), 1.0, generation=generation),
        precision="fp8" if fp8 else "bf16",
        kind=kind,
    )


def test_fit_recovers_a_known_fp8_factor_on_dense_fp8_rows():
    shapes = {"1": _shape(1.0, 2.0), "2": _shape(0.5, 3.0), "3": _shape(2.0, 1.0)}
    rows = [_row(r, "A-1", s, (0.6, 0.0)) for r, s in shapes.items()]
    bf16 = _outcome("4", "A-1", 1.0, 1.5)
    shapes["4"] = _shape(1.5, 0.0)
    model = fitting.fit_model([*rows, bf16], _predictor(shapes), GRID)
    assert model.fp8_factor == 0.6 and model.fitted_on == ("1", "2", "3")
    assert model.moe_host_launch_s == 0.0 and model.host_fitted_on == ()
    applied = fitting.apply_model([*rows, bf16], _predictor(shapes), model)
    assert [o.error for o in applied[:3]] == pytest.approx([0.0] * 3)
    assert applied[3].predicted_s == 1.5
    assert fitting.fit_model([bf16], _predictor(shapes), GRID).fp8_factor is None


def test_per_generation_fit_recovers_each_generation_and_shares_one_for_the_rest():
    shapes = {"1": _shape(1.0, 2.0), "2": _shape(0.5, 3.0), "3": _shape(1.0, 2.0)}
    hopper = [_row(r, "A-1", shapes[r], (0.7, 0.0)) for r in ("1", "2")]
    blackwell = _row("3", "B-1", shapes["3"], (0.55, 0.0), generation="Blackwell")
    predict = _predictor(shapes)
    model = fitting.fit_model([*hopper, blackwell], predict, GRID, per_generation=True)
    assert model.fp8_factors == {"H100/H800": 0.7, "Blackwell": 0.55}
    assert model.fp8_fitted_on == {"H100/H800": ("1", "2"), "Blackwell": ("3",)}
    assert model.factor("A100") == model.fp8_factor in (0.7, 0.55)
    single = fitting.fit_model([*hopper, blackwell], predict, GRID)
    assert single.fp8_factors == {} and single.factor("Blackwell") == single.fp8_factor


def test_fp8_factor_and_host_launch_time_are_fitted_jointly_on_moe_rows():
    # No dense row: the factor and the launch time are both set by the MoE rows, one bound
    # by its GPU time (wants 0.5), one by its host floor (wants 40 us at that factor).
    truth = (0.5, 40e-6)
    shapes = {"1": _shape(1.0, 1.0), "2": _shape(1.0, 1.0, n=1e5), "3": _shape(1.0, 1.0)}
    moe = [_row(r, "A-1", shapes[r], truth, kind="moe") for r in ("1", "2")]
    dense_bf16 = _row("3", "A-1", shapes["3"], truth, fp8=False)
    model = fitting.fit_model([*moe, dense_bf16], _predictor(shapes), GRID)
    assert (model.fp8_factor, model.moe_host_launch_s) == truth
    assert model.fitted_on == ("1", "2") and model.host_fitted_on == ("1", "2")


def test_leave_one_source_out_refits_every_parameter_without_the_left_out_rows():
    # Family A: an H100 dense FP8 row (wants 0.7) and a host-bound MoE row (wants 40 us);
    # family B: a Blackwell dense FP8 row (wants 0.55). Left out, each family is predicted
    # with what the other alone gives: A with 0.55 and no host floor, B with 0.7.
    # (a bf16 row has no fp8 GEMM part: w = 0)
    shapes = {"1": _shape(1.0, 2.0), "2": _shape(1.1, 0.0, n=1e5), "3": _shape(1.0, 2.0)}
    dense_a = _row("1", "A-1", shapes["1"], (0.7, 40e-6))
    moe_a = _row("2", "A-2", shapes["2"], (0.7, 40e-6), kind="moe", fp8=False)
    dense_b = _row("3", "B-1", shapes["3"], (0.55, 0.0), generation="Blackwell")
    outcomes = [dense_a, moe_a, dense_b]
    for per_generation in (False, True):
        calls: list[str] = []
        predicted, models = fitting.leave_one_source_out(
            outcomes, _predictor(shapes, calls), GRID, per_generation=per_generation
        )
        assert models["A"].fitted_on == ("3",) and models["A"].host_fitted_on == ()
        assert models["A"].factor("H100/H800") == 0.55 and models["A"].moe_host_launch_s == 0.0
        assert models["B"].fitted_on == ("1",) and models["B"].host_fitted_on == ("2",)
        assert models["B"].factor("Blackwell") == 0.7
        assert models["B"].moe_host_launch_s == 40e-6
        by_row = {o.row_id: o.predicted_s for o in predicted}
        assert by_row == {
            "1": shapes["1"](0.55, 0.0),
            "2": shapes["2"](None, 0.0),
            "3": shapes["3"](0.7, 40e-6),
        }
        assert set(calls) == {"1", "2", "3"}


def test_a_fixed_host_launch_time_is_an_input_of_every_fit_not_fitted():
    # The rows of the test above with the launch time fixed at 25 us, away from the 40 us
    # the MoE row wants: no fit moves it, and family A, left without MoE rows to fit it,
    # still prices its MoE row with it (a fitted launch time would be 0 there).
    shapes = {"1": _shape(1.0, 2.0), "2": _shape(1.1, 0.0, n=1e5), "3": _shape(1.0, 2.0)}
    dense_a = _row("1", "A-1", shapes["1"], (0.7, 40e-6))
    moe_a = _row("2", "A-2", shapes["2"], (0.7, 40e-6), kind="moe", fp8=False)
    dense_b = _row("3", "B-1", shapes["3"], (0.55, 0.0), generation="Blackwell")
    outcomes = [dense_a, moe_a, dense_b]
    fixed = dataclasses.replace(GRID, host_launch_s=(25e-6,))
    assert fixed.host_launch_fixed and not GRID.host_launch_fixed
    model = fitting.fit_model(outcomes, _predictor(shapes), fixed)
    assert model.moe_host_launch_s == 25e-6 and model.host_fitted_on == ()
    predicted, models = fitting.leave_one_source_out(outcomes, _predictor(shapes), fixed)
    assert {f: m.moe_host_launch_s for f, m in models.items()} == {"A": 25e-6, "B": 25e-6}
    assert models["B"].factor("Blackwell") == 0.7
    by_row = {o.row_id: o.predicted_s for o in predicted}
    assert by_row["2"] == shapes["2"](None, 25e-6) == pytest.approx(2.5)


def test_fit_grid_fixes_only_the_host_launch_time():
    assert pricing.fit_grid() is pricing.FIT_GRID and not pricing.FIT_GRID.host_launch_fixed
    grid = pricing.fit_grid(12e-6)
    assert grid.host_launch_s == (12e-6,) and grid.host_launch_fixed
    assert (grid.fp8_factors, grid.sustained_factors) == (
        pricing.FIT_GRID.fp8_factors,
        pricing.FIT_GRID.sustained_factors,
    )


def test_no_fit_host_launch_time_reprices_only_the_moe_rows():
    shapes = {"1": _shape(1.0, 0.0, n=1e5), "2": _shape(1.0, 0.0, n=1e5)}
    moe = _row("1", "A-1", shapes["1"], (None, 40e-6), kind="moe", fp8=False)
    dense = _row("2", "A-1", shapes["2"], (None, 40e-6), fp8=False)
    calls: list[str] = []
    repriced = pricing.at_host_launch([moe, dense], _predictor(shapes, calls), 30e-6)
    assert calls == ["1"]
    assert [o.predicted_s for o in repriced] == pytest.approx([3.0, dense.predicted_s])
    assert repriced[0].error == pytest.approx(3.0 / 4.0 - 1.0)


def test_json_rows_carry_a_not_fit_reason_only_when_one_is_known():
    plain = _outcome("1", "MBRIDGE-26.02.01", 1.0, 1.0)
    assert "not_fit_reason" not in report_mod.outcome_row(plain, 0.0)
    flagged = dataclasses.replace(plain, fits=False, not_fit_reason="printed unlike the recipe")
    row = report_mod.outcome_row(flagged, 0.0)
    assert row["not_fit_reason"] == "printed unlike the recipe" and row["fits"] is False


def test_not_fitting_rows_are_reported_apart_with_their_reason():
    fits = _outcome("1", "MBRIDGE-26.02", 1.0, 1.0)
    printed = dataclasses.replace(
        _outcome("2", "MBRIDGE-26.02.01", 1.0, 1.0), fits=False, not_fit_reason="printed pp4"
    )
    over = dataclasses.replace(_outcome("3", "NEMO-LONGSEQ", 1.0, 1.0), fits=False)
    report = report_mod.not_fitting_report([fits, printed, over])
    listed = {r["row_id"]: r["printed_not_recipe"] for r in report["not_fitting"]}
    assert listed == {"2": "printed pp4", "3": ""}
    # the row printed unlike its recipe is left out of the as-run fraction, the other counts
    assert report["fit_fraction_as_run"] == pytest.approx(1 / 2)
    assert stats.summary([fits, printed, over])["fit_fraction"] == pytest.approx(1 / 3)


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
