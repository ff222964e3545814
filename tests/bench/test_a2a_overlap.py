"""bench/a2a_overlap.py: the MoE 1F1B all-to-all overlap against the model zoo's published
H100 ablation (19.7 s without, 17.6 s with) and its overlapped dev-set rows 391 and 393."""

from __future__ import annotations

import pytest

from tests.bench.bench_loader import load_bench

bench = load_bench("a2a_overlap")


def _skip_without_rows() -> None:
    _, error = bench.rows_by_ids(f"{bench.H100_BASE_ROW},{bench.ZOO_OVERLAP_ROWS}")
    if error is not None:
        pytest.skip(error)


def test_h100_ablation_runs_the_tables_plan_and_command():
    _skip_without_rows()
    case = bench.h100_case()
    plan = case.plan
    assert (plan.tp, plan.pp, plan.vpp, plan.ep, plan.expert_tp, plan.dp) == (2, 8, 4, 32, 1, 16)
    assert plan.micro_batch_size == 1 and plan.sequence_parallel
    assert plan.recompute == "selective"
    assert set(plan.recompute_modules) == {"layernorm", "moe_act"}
    assert case.job.global_batch_size == 2048 and case.job.seq_length == 4096
    assert case.job.precision == "bf16"
    assert case.cluster.num_gpus == 256
    assert case.profile.startswith("h100")
    assert case.options.moe_dispatcher == "flex"
    assert case.options.cuda_graph_scopes == {"moe_router", "moe_preprocess"}
    assert case.options.moe_a2a_overlap is False


def test_overlap_entry_sets_both_ratios_only_where_both_times_are_known():
    _skip_without_rows()
    case = bench.h100_case()
    entry = bench.overlap_entry("x", case, {"no_overlap": 20.0, "overlap": 15.0})
    pred = entry["predicted_s"]
    assert entry["predicted_ratio"] == pytest.approx(pred["overlap"] / pred["no_overlap"])
    assert entry["published_ratio"] == pytest.approx(0.75)
    assert "published_ratio" not in bench.overlap_entry("y", case, {"overlap": 15.0})


def test_report_covers_the_ablation_and_the_overlapped_rows():
    _skip_without_rows()
    report = bench.overlap_report()
    assert [e["case"] for e in report] == ["h100_ablation", "row 391", "row 393"]
    assert report[0]["published_ratio"] == pytest.approx(17.6 / 19.7)
