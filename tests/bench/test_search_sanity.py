"""bench/search_sanity.py and its helpers (sanity_claims.py, sanity_cases.py,
sanity_text.py): where a claimed speedup comes from, and how far its pick is from not
fitting."""

from __future__ import annotations

import dataclasses
import json

import pytest

from costmodel.estimate import estimate_plan
from costmodel.memory import memory_per_stage
from costmodel.memory_allowances import FrameworkAllowance
from profiles.store import load_profile
from tests.bench.bench_loader import load_bench
from tests.bench.validation_cases import ROW_1, SC21_ROW

rows_mod = load_bench("published_rows")
sanity = load_bench("search_sanity")
claims = load_bench("sanity_claims")
cases = load_bench("sanity_cases")
text = load_bench("sanity_text")

ROW_17 = SC21_ROW | {
    # published-runs-dev.csv row 17 (SC21 Table 2, GPT 174.6B on 384 GPUs, VPP not stated)
    "row_id": "17",
    "source_id": "SC21-T2",
    "model": "GPT 174.6B",
    "num_layers": "96",
    "hidden_size": "12288",
    "num_attention_heads": "96",
    "num_query_groups": "96",
    "ffn_hidden_size": "49152",
    "num_gpus": "384",
    "tp": "8",
    "pp": "12",
    "vpp": "",
    "dp": "4",
    "micro_batch_size": "1",
    "global_batch_size": "1536",
}


def test_phase_gains_add_up_to_the_claimed_speedup():
    recipe = {"compute_forward": 1.0, "compute_recompute": 0.9, "tp_exposed": 0.5, "bubble": 0.2}
    pick = {"compute_forward": 1.1, "compute_recompute": 0.0, "tp_exposed": 0.3, "bubble": 0.4}
    gains = claims.gain_by_phase(recipe, pick)
    speedup = sum(recipe.values()) / sum(pick.values())
    assert sum(gains.values()) == pytest.approx(1 - 1 / speedup)
    assert gains["compute_recompute"] == pytest.approx(0.9 / 2.6)
    assert gains["bubble"] < 0 < gains["tp_exposed"]
    assert "compute_recompute" in text.main_phases(gains, count=1)


def test_pick_overflows_exactly_at_its_overflow_fragmentation():
    # The row 1 pick without recompute (micro-batch 2) under Megatron-LM 2021: with the
    # returned fragmentation share its peak stage fills the device to the byte.
    case = rows_mod.case_for_row(ROW_1)
    plan = dataclasses.replace(case.plan, micro_batch_size=2, recompute="none")
    profile = load_profile(case.profile)
    est = estimate_plan(case.model, case.cluster, case.job, plan, profile, options=case.options)
    allowance = FrameworkAllowance()
    share = claims.overflow_fragmentation(est, allowance)
    assert share > case.options.allocator_fragmentation  # the pick fits as priced
    options = case.options
    stages = memory_per_stage(
        case.model,
        case.job,
        plan,
        attention=options.attention,
        dropout=options.hidden_dropout,
        main_grad_bytes=options.main_grad_bytes,
        keep_outputs=not options.deallocate_pipeline_outputs,
        ddp_gradient_copy=options.ddp_gradient_copy,
        cross_entropy=options.cross_entropy_fusion,
        fragmentation=share,
    )
    peak = max(stage.total_bytes for stage in stages)
    assert peak == pytest.approx(est.device_memory_bytes, rel=1e-9)


def test_recipe_vpp_interleaves_only_pipelined_recipes_published_without_it():
    case = rows_mod.case_for_row(ROW_17)
    assert case.plan.vpp == 1
    interleaved = cases.with_recipe_vpp(case, 4).plan
    assert (interleaved.vpp, interleaved.schedule) == (4, "interleaved")
    assert dataclasses.replace(interleaved, vpp=1, schedule=case.plan.schedule) == case.plan
    assert cases.with_recipe_vpp(case, 1) is case
    unpipelined = rows_mod.case_for_row(ROW_1)
    assert cases.with_recipe_vpp(unpipelined, 4) is unpipelined


def test_command_prints_one_row_as_json(capsys):
    # published-runs-dev.csv row 1 alone ("1.7B" matches no other model or source id).
    if load_bench("published_csv").default_csv() is None:
        pytest.skip("published-runs-dev.csv not found above the repository")
    assert sanity.main(["--rows", "1.7B", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    (row,) = result["rows"]
    assert row["row_id"] == "1"
    assert sum(row["pick_gain_by_phase"].values()) == pytest.approx(1 - 1 / row["claimed_speedup"])
    assert row["pick_overflow_fragmentation"] > row["assumed_fragmentation"]
