"""bench/zero3_recipes.py: the DeepSpeed ZeRO-3 rows of SC21 Table 2 priced as DeepSpeed's
stage-3 engine, with the recompute setting of 2021 code that fits."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.execution_presets import DEEPSPEED_ZERO3_2021, MEGATRON_2021
from profiles.store import load_profile
from tests.bench.bench_loader import load_bench
from tests.bench.published_row_cases import ZERO3_SC21, row_with
from tests.bench.validation_cases import dev_rows

zero3 = load_bench("zero3_recipes")
rows_mod = load_bench("published_rows")
stats = load_bench("validation_stats")
pricing = load_bench("row_pricing")

A100 = load_profile("a100-sxm-80gb")


def test_2021_code_had_no_selective_recompute():
    """Selective recompute (Korthikanti et al. 2022) is in neither 2021 option set, so the
    unstated setting is chosen between none and full."""
    for options in (MEGATRON_2021, DEEPSPEED_ZERO3_2021):
        assert "selective_recompute" not in options.plan_features
        assert "recompute_modules" not in options.plan_features
    assert zero3.RECOMPUTE_2021 == ("none", "full")


def test_zero3_row_is_sharded_and_run_by_deepspeeds_engine():
    case = rows_mod.case_for_row(ZERO3_SC21)
    assert case.plan.use_megatron_fsdp
    assert case.plan.data_parallel_sharding_strategy == "optim_grads_params"
    assert not case.plan.distributed_optimizer
    assert (case.plan.tp, case.plan.pp, case.plan.dp) == (1, 1, 384)
    assert case.options.param_gather_engine == "deepspeed_zero3"
    assert case.options == DEEPSPEED_ZERO3_2021


def test_175b_at_micro_batch_4_fits_only_with_full_recompute():
    """GPT 175B at micro-batch 4 without recompute keeps every layer's activations
    (34·s·b·h + 5·a·s²·b bytes per layer, Korthikanti et al. 2022, Table 2: 11.5 GB
    each, 96 layers), far over 80 GiB; full recompute keeps each layer's input only."""
    case = rows_mod.case_for_row(ZERO3_SC21)
    unstated = dataclasses.replace(case.plan, recompute="none")
    chosen = zero3.zero3_recompute(case.model, case.job, unstated, case.options, A100)
    assert chosen.recompute == "full"
    assert chosen.peak_gib["none"] > 10 * A100.device.memory_gib
    assert chosen.peak_gib["full"] <= A100.device.memory_gib
    assert case.plan.recompute == "full"
    assert "recompute not stated" in case.assumption and "full recompute" in case.assumption


def test_a_stated_recompute_is_kept():
    case = rows_mod.case_for_row(row_with(ZERO3_SC21, recompute="full"))
    assert case.plan.recompute == "full" and case.assumption == ""


def test_no_setting_fits_keeps_the_refusal_with_both_peaks():
    """Row 14 (530B, micro-batch 4, 640 GPUs): over the device under both settings."""
    (raw,) = dev_rows("14")
    with pytest.raises(rows_mod.NotExpressible, match="no setting of 2021 code fits") as err:
        rows_mod.case_for_row(raw)
    assert "none" in str(err.value) and "full" in str(err.value)


def test_zero3_and_ptdp_rows_share_a_strategy_group_but_zero3_is_priced_apart():
    """Rows 11 (ZeRO-3, 384 GPUs) and 17 (PTD-P, 384 GPUs) of SC21 Table 2: one source,
    model, cluster, sequence and precision, so their order would enter the Kendall tau; the
    ZeRO-3 row carries the reason it is reported apart (`zero3_apart.split_apart`)."""
    zero3_row, ptdp_row = dev_rows("11,17")
    outcomes = [pricing.evaluate_row(r)[0] for r in (zero3_row, ptdp_row)]
    assert stats.strategy_key(outcomes[0]) == stats.strategy_key(outcomes[1])
    assert stats.strategy_of(outcomes[0]) != stats.strategy_of(outcomes[1])
    assert outcomes[0].assumption and not outcomes[1].assumption
    assert outcomes[0].apart_reason == zero3.APART_REASON and not outcomes[1].apart_reason
    assert zero3.priced_apart_reason(ptdp_row) == ""


def test_the_assumption_reaches_the_json_and_the_page():
    (raw,) = dev_rows("11")
    outcome, _ = pricing.evaluate_row(raw)
    row = load_bench("validation_report").outcome_row(outcome, outcome.error)
    assert row["assumption"] == outcome.assumption
    lines = load_bench("validation_tables").assumption_lines([row, {"row_id": "17"}])
    assert lines[1] == "## Settings the rows do not state"
    assert lines[3].startswith("- Row 11 (GPT 174.6B): recompute not stated")
    assert load_bench("validation_tables").assumption_lines([{"row_id": "17"}]) == []
    apart = load_bench("zero3_apart").apart_row(outcome)
    assert apart["assumption"] == outcome.assumption
