"""bench/zoo_h100.py: the Megatron-MoE model zoo's Qwen3 235B-A22B H100 table, priced as its
rows and commands state (yanring/Megatron-MoE-ModelZoo best_practice/qwen3/readme.md at
e8650517)."""

from __future__ import annotations

import pytest

from tests.bench.bench_loader import load_bench

bench = load_bench("zoo_h100")


def _skip_without_base_row() -> None:
    _, error = bench.rows_by_ids(bench.BASE_ROW)
    if error is not None:
        pytest.skip(error)


def test_every_run_fills_256_gpus():
    for run in bench.RUNS:
        assert run.tp * run.pp * run.dp == 256, run.name


@pytest.mark.parametrize("run", bench.RUNS, ids=lambda r: r.name)
def test_runs_carry_the_table_and_the_bf16_command(run):
    _skip_without_base_row()
    case = bench.zoo_run_case(run)
    plan, options = case.plan, case.options
    assert (plan.tp, plan.pp, plan.vpp, plan.ep, plan.expert_tp, plan.dp) == (
        run.tp,
        run.pp,
        run.vpp,
        run.ep,
        1,
        run.dp,
    )
    assert plan.micro_batch_size == run.micro_batch_size and plan.sequence_parallel
    assert plan.tp_comm_overlap  # PR=bf16 adds --tp-comm-overlap
    assert plan.recompute == run.recompute
    if run.recompute == "selective":
        assert set(plan.recompute_modules) == {"layernorm", "moe_act"}
    assert plan.use_megatron_fsdp is run.megatron_fsdp
    assert case.cluster.num_gpus == 256 and case.profile.startswith("h100")
    assert (case.job.global_batch_size, case.job.seq_length, case.job.precision) == (
        2048,
        4096,
        "bf16",
    )
    assert options.moe_dispatcher == run.dispatcher
    assert options.moe_a2a_overlap is run.a2a_overlap
    assert options.cuda_graph_scopes == {"moe_router", "moe_preprocess"}


def test_report_scores_the_runs_against_their_published_order():
    _skip_without_base_row()
    report = bench.zoo_report()
    runs = report["runs"]
    assert [r["run"] for r in runs] == [run.name for run in bench.RUNS]
    for r in runs:
        assert r["error"] == pytest.approx(r["predicted_s"] / r["published_s"] - 1)
    assert report["pairs"] == 10
    assert -1.0 <= report["kendall_tau"] <= 1.0
