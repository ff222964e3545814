"""The closed-form screen against the event simulator (costmodel.runtimes.megatron.screen)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from costmodel.estimate import estimate_plan
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS, MEGATRON_2021
from costmodel.plan_frame import plans_frame
from costmodel.screen import screen_plans
from profiles.store import load_profile
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from specs.rules import check_plan

H100 = load_profile("h100-sxm-80gb")
A100 = load_profile("a100-sxm-80gb")


def valid_plans(model, cluster, job, grid):
    plans = []
    for values in itertools.product(*grid.values()):
        knobs = dict(zip(grid, values, strict=True))
        if knobs.get("overlap_param_gather") and not knobs.get("distributed_optimizer"):
            continue
        if knobs.get("tp_comm_overlap") and not knobs.get("sequence_parallel"):
            continue
        plan = ParallelPlan.for_world(cluster.num_gpus, **knobs)
        if not check_plan(model, cluster, job, plan):
            plans.append(plan)
    return plans


def compare(model, cluster, job, plans, profile=H100, options=DEFAULT_OPTIONS):
    screened = screen_plans(model, cluster, job, profile, plans_frame(plans), options=options)
    simulated = [estimate_plan(model, cluster, job, p, profile, options=options) for p in plans]
    time_err = screened["iteration_time_s"] / [e.iteration_time_s for e in simulated] - 1
    mem_err = screened["peak_memory_bytes"] / [e.peak_memory_bytes for e in simulated] - 1
    return np.abs(time_err.to_numpy()), np.abs(mem_err.to_numpy())


HYBRID_GRID = {
    "tp": [1, 2, 4],
    "pp": [1, 2, 4],
    "vpp": [1, 2],
    "cp": [1, 2],
    "micro_batch_size": [1, 2],
    "sequence_parallel": [False, True],
    "recompute": ["none", "selective", "full"],
    "distributed_optimizer": [True],
    "overlap_grad_reduce": [True],
}
"""The plan grid the hybrid-model screen checks walk (every Nth valid plan); cp 2 prices
the Mamba-2 mixers' all-to-alls (`costmodel.runtimes.megatron.mamba_cp`) and the attention
layers' CP exchange."""


def assert_screen_agrees(model, cluster, job, grid, *, every: int, at_least: int) -> None:
    """The screen within 5% of the simulated time and memory on every ``every``-th valid
    plan of ``grid``, of which there are more than ``at_least``."""
    plans = valid_plans(model, cluster, job, grid)[::every]
    assert len(plans) > at_least
    time_err, mem_err = compare(model, cluster, job, plans)
    assert np.max(time_err) < 0.05
    assert np.max(mem_err) < 0.05


def test_screen_agrees_with_the_simulator_on_uniform_dense_models():
    model = get_preset("llama3-8b")
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=64)
    job = TrainingJob(seq_length=4096, global_batch_size=128)
    grid = {
        "tp": [1, 2, 8],
        "pp": [1, 2, 4],
        "vpp": [1, 2],
        "cp": [1, 2],
        "micro_batch_size": [1, 2],
        "sequence_parallel": [False, True],
        "recompute": ["none", "selective", "full"],
        "distributed_optimizer": [True],
        "overlap_grad_reduce": [False, True],
        "overlap_param_gather": [False, True],
    }
    plans = valid_plans(model, cluster, job, grid)[::5]
    assert len(plans) > 40
    time_err, mem_err = compare(model, cluster, job, plans)
    assert time_err.max() < 0.05
    assert mem_err.max() < 0.01


@pytest.mark.parametrize("preset", ["gpt-7.5b", "mixtral-8x7b"])
def test_screen_agrees_on_other_uniform_models(preset):
    model = get_preset(preset)
    cluster = ClusterSpec(hardware="a100-sxm-80gb", num_gpus=32)
    job = TrainingJob(seq_length=2048, global_batch_size=64)
    grid = {
        "tp": [2, 4],
        "pp": [1, 2, 4],
        "vpp": [1, 2],
        "ep": [1, 4] if model.is_moe else [1],
        "recompute": ["none", "full"],
        "distributed_optimizer": [False, True],
        "overlap_grad_reduce": [False, True],
    }
    plans = valid_plans(model, cluster, job, grid)
    options = ExecutionOptions(attention="materialized", grad_accumulation_fusion=False)
    time_err, mem_err = compare(model, cluster, job, plans, A100, options)
    assert time_err.max() < 0.05
    assert mem_err.max() < 0.01


def test_screen_agrees_under_the_2021_conventions():
    # Blocking interleaved sends, scattered over the tp NICs, fp16 gradients, unfused
    # biases, apex norms and loss scaling (costmodel.execution_presets.MEGATRON_2021).
    model = get_preset("gpt-18.4b")
    cluster = ClusterSpec(hardware="a100-sxm-80gb", num_gpus=64)
    job = TrainingJob(seq_length=2048, global_batch_size=128)
    grid = {
        "tp": [2, 8],
        "pp": [1, 2, 4],
        "vpp": [1, 2],
        "micro_batch_size": [1, 2],
        "recompute": ["full"],
        "overlap_grad_reduce": [False, True],
    }
    plans = valid_plans(model, cluster, job, grid)
    assert len(plans) > 12
    time_err, mem_err = compare(model, cluster, job, plans, A100, MEGATRON_2021)
    assert time_err.max() < 0.05
    assert mem_err.max() < 0.01


def test_screen_output_columns_and_bad_rows():
    model = get_preset("llama3-8b")
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=16)
    job = TrainingJob(seq_length=4096, global_batch_size=32)
    frame = pd.DataFrame({"tp": [2, 2, 4], "pp": [2, 4, 2], "vpp": [1, 2, 1]})
    frame.loc[1, "vpp"] = 2  # pp 4, dp 2: 16 microbatches, fine
    out = screen_plans(model, cluster, job, H100, frame)
    for column in ("iteration_time_s", "tokens_per_s", "mfu", "peak_memory_gib", "fits"):
        assert column in out
    assert (out["dp"] == [4, 2, 2]).all()
    odd = screen_plans(
        model,
        cluster,
        job,
        H100,
        pd.DataFrame({"tp": [2], "pp": [4], "vpp": [2], "micro_batch_size": [3]}),
    )
    assert np.isinf(odd["iteration_time_s"]).all() and not odd["fits"].any()
    with pytest.raises(SpecError, match="unknown plan columns"):
        screen_plans(model, cluster, job, H100, pd.DataFrame({"tensor_parallel": [2]}))


def test_screen_handles_many_rows_quickly():
    model = get_preset("llama3-70b")
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=1024)
    job = TrainingJob(seq_length=8192, global_batch_size=1024)
    grid = {
        "tp": [1, 2, 4, 8],
        "pp": [1, 2, 4, 8, 16],
        "vpp": [1, 2, 5],
        "cp": [1, 2, 4],
        "micro_batch_size": [1, 2, 4],
        "sequence_parallel": [False, True],
        "recompute": ["none", "selective", "full"],
        "distributed_optimizer": [False, True],
        "overlap_grad_reduce": [False, True],
    }
    rows = pd.DataFrame(list(itertools.product(*grid.values())), columns=list(grid))
    rows = rows[(rows.pp > 1) | (rows.vpp == 1)]
    rows = rows[(rows.tp > 1) | ~rows.sequence_parallel]
    big = pd.concat([rows] * 4, ignore_index=True)
    out = screen_plans(model, cluster, job, H100, big)
    assert len(out) == len(big) > 20_000
    finite = out["iteration_time_s"][np.isfinite(out["iteration_time_s"])]
    assert (finite > 0).all()


def test_screen_agrees_with_the_simulator_on_uneven_splits():
    # Llama-3-8B's 32 layers on 48 GPUs: pp 6 needs first/last counts (4 + 4·6 + 4), pp 2
    # the account-for flags ((32 + 2) / 2 = 17), and a layout on pp 3.
    model = get_preset("llama3-8b")
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=48)
    job = TrainingJob(seq_length=4096, global_batch_size=96)
    splits = [
        {"pp": 6, "decoder_first_pipeline_num_layers": 4, "decoder_last_pipeline_num_layers": 4},
        {
            "pp": 6,
            "vpp": 2,
            "decoder_first_pipeline_num_layers": 4,
            "decoder_last_pipeline_num_layers": 4,
        },
        {
            "pp": 2,
            "account_for_embedding_in_pipeline_split": True,
            "account_for_loss_in_pipeline_split": True,
        },
        {"pp": 3, "pipeline_model_parallel_layout": "Et*10|t*12|t*10L"},
    ]
    plans = []
    for split in splits:
        for recompute in ("none", "selective", "full"):
            plan = ParallelPlan.for_world(
                48, tp=8, distributed_optimizer=True, recompute=recompute, **split
            )
            assert check_plan(model, cluster, job, plan) == [], plan.label()
            plans.append(plan)
    time_err, mem_err = compare(model, cluster, job, plans)
    # The interleaved closed form m·max T + (ΣT - max T)/v assumes equal chunks; with
    # unequal ranks the simulated schedule waits more (pp6 vpp2 first/last 4: 9.3%).
    assert time_err.max() < 0.10
    assert mem_err.max() < 0.01


def test_screen_agrees_with_the_simulator_on_megatron_fsdp():
    # Every sharding strategy on dense and pipelined Llama-3-8B plans: the closed form
    # prices the sharded state, the per-layer gathers of optim_grads_params and the
    # post-step gather of optim / optim_grads as the simulator does.
    model = get_preset("llama3-8b")
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=16)
    job = TrainingJob(seq_length=4096, global_batch_size=64)
    plans = []
    for degrees in ({"tp": 1, "pp": 1}, {"tp": 2, "pp": 2}, {"tp": 2, "pp": 2, "vpp": 2}):
        for strategy in ("no_shard", "optim", "optim_grads", "optim_grads_params"):
            plan = ParallelPlan.for_world(
                16,
                **degrees,
                schedule="interleaved" if degrees.get("vpp", 1) > 1 else "1f1b",
                recompute="full",
                recompute_num_layers=1,
                use_megatron_fsdp=True,
                data_parallel_sharding_strategy=strategy,
                overlap_grad_reduce=True,
                overlap_param_gather=strategy != "no_shard",
            )
            assert check_plan(model, cluster, job, plan) == [], plan.label()
            plans.append(plan)
    time_err, mem_err = compare(model, cluster, job, plans)
    assert time_err.max() < 0.05
    assert mem_err.max() < 0.01


def test_screen_agrees_when_megatron_fsdp_is_network_bound():
    # Llama-3-70B at tp 2 on H100 servers: the per-layer gathers and the per-backward
    # reduce-scatters of Megatron-FSDP take longer than the compute of every microbatch at
    # tp 2 (four ranks of the group per server) and not at tp 1 (eight).
    model = get_preset("llama3-70b")
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=64)
    job = TrainingJob(seq_length=2048, global_batch_size=256)
    knobs = {
        "micro_batch_size": 1,
        "recompute": "full",
        "use_megatron_fsdp": True,
        "overlap_grad_reduce": True,
        "overlap_param_gather": True,
    }
    plans = [
        ParallelPlan.for_world(64, tp=tp, pp=pp, data_parallel_sharding_strategy=strategy, **knobs)
        for tp in (1, 2)
        for pp in (1, 2)
        for strategy in ("optim_grads", "optim_grads_params")
    ]
    time_err, mem_err = compare(model, cluster, job, plans)
    assert time_err.max() < 0.05
    assert mem_err.max() < 0.01


def test_screen_prices_the_last_stage_parameter_gather_when_it_is_the_largest():
    # A layout that puts 30 of Llama-3-8B's 32 layers on the last stage, the distributed
    # optimizer's all-gather across 16 data-parallel ranks (two servers) left unoverlapped:
    # the last stage's gather, not stage 0's, sets the iteration's tail.
    model = get_preset("llama3-8b")
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=32)
    job = TrainingJob(seq_length=4096, global_batch_size=32)
    plan = ParallelPlan.for_world(
        32,
        tp=1,
        pp=2,
        distributed_optimizer=True,
        recompute="full",
        pipeline_model_parallel_layout="Et*2|t*30L",
    )
    assert check_plan(model, cluster, job, plan) == []
    time_err, _ = compare(model, cluster, job, [plan])
    assert time_err.max() < 0.05


@pytest.mark.parametrize("optimizer", ["dist_muon", "muon"])
def test_screen_agrees_with_the_simulator_on_muon(optimizer):
    # Muon's state and step on the rank with the most state after the whole-parameter deal
    # (costmodel.muon_sharding), per stage, and dist_muon's gather after the step.
    model = get_preset("llama3-8b")
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=32)
    job = TrainingJob(seq_length=4096, global_batch_size=64, optimizer=optimizer)
    grid = {
        "tp": [1, 2, 8],
        "pp": [1, 2, 4],
        "vpp": [1, 2],
        "micro_batch_size": [1, 2],
        "recompute": ["full"],
        "overlap_grad_reduce": [False, True] if optimizer == "dist_muon" else [False],
    }
    plans = valid_plans(model, cluster, job, grid)
    assert len(plans) > 20
    time_err, mem_err = compare(model, cluster, job, plans)
    assert time_err.max() < 0.05
    assert mem_err.max() < 0.01


@pytest.mark.parametrize("optimizer", ["dist_muon", "muon"])
def test_screen_agrees_with_the_simulator_on_muon_moe(optimizer):
    # Routed experts dealt over expert-dp (ep 4) or with the dense parameters (ep 1).
    model = get_preset("mixtral-8x7b")
    cluster = ClusterSpec(hardware="a100-sxm-80gb", num_gpus=32)
    job = TrainingJob(seq_length=2048, global_batch_size=64, optimizer=optimizer)
    grid = {
        "tp": [2, 4],
        "pp": [1, 2, 4],
        "vpp": [1, 2],
        "ep": [1, 4],
        "recompute": ["none", "full"],
        "overlap_grad_reduce": [False, True] if optimizer == "dist_muon" else [False],
    }
    plans = valid_plans(model, cluster, job, grid)
    assert any(p.ep > 1 for p in plans) and any(p.ep == 1 for p in plans)
    options = ExecutionOptions(attention="materialized", grad_accumulation_fusion=False)
    time_err, mem_err = compare(model, cluster, job, plans, A100, options)
    assert time_err.max() < 0.05
    assert mem_err.max() < 0.01


def test_screen_agrees_on_a_transformer_with_an_mtp_layer():
    # DeepSeek-V3's shapes on 8 layers (3 dense, 5 MoE) and its one MTP layer, which both
    # the screen and the simulator keep on the last chunk, one layer's activations per
    # in-flight microbatch (costmodel.activations)
    model = get_preset("deepseek-v3").replace(num_layers=8)
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=64)
    job = TrainingJob(seq_length=4096, global_batch_size=128)
    grid = {
        "tp": [1, 2],
        "pp": [1, 2],
        "ep": [8, 16],
        "micro_batch_size": [1, 2],
        "sequence_parallel": [True],
        "recompute": ["none", "selective", "full"],
        "distributed_optimizer": [True],
        "overlap_grad_reduce": [True],
    }
    # the MTP depth's eh_proj work and its layer's optimizer tensors priced on both sides
    # (costmodel.runtimes.megatron.mtp_costs, costmodel.rank_params.stage_weight_layers)
    plans = valid_plans(model, cluster, job, grid)[::2]
    assert len(plans) > 10
    time_err, mem_err = compare(model, cluster, job, plans)
    assert time_err.max() < 0.04
    assert mem_err.max() < 1e-9
