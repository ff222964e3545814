"""A transformer's multi-token-prediction depth in the Megatron runtime: its layers count in
the optimizer step like the decoder's (simulator and screen), Megatron-FSDP counts each of
its unit modules once, and each depth prices its embedding, ``enorm``/``hnorm``, the
concatenation and ``eh_proj`` with its TP collectives
(megatron/core/transformer/multi_token_prediction.py, `MultiTokenPredictionLayer`)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from costmodel import compute as ops
from costmodel.collectives import collective_time_s
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.iteration import simulate_iteration
from costmodel.passes import comm_groups
from costmodel.rank_params import (
    outside_tensors,
    shared_word_embedding,
    stage_lora_adapters,
    stage_outside_tensors,
    stage_weight_layers,
)
from costmodel.runtimes.megatron import optimizer_step
from costmodel.runtimes.megatron.fp8_scaling import (
    EH_PROJ_MODULES,
    delayed_scaling_pair,
    layer_fp8_modules,
    stage_fp8_modules,
)
from costmodel.runtimes.megatron.layer_costs import layer_cost
from costmodel.runtimes.megatron.mtp_costs import mtp_depth_cost
from costmodel.runtimes.megatron.pricing import chunk_costs
from costmodel.runtimes.megatron.runtime import MegatronRuntime
from costmodel.runtimes.megatron.screen_sharding import fsdp_reduce_per_microbatch_s
from costmodel.runtimes.megatron.vocab_costs import embedding_cost
from costmodel.schedules import plan_pipeline_chunks
from costmodel.topology import plan_placements
from profiles.store import load_profile
from specs.cluster import ClusterSpec
from specs.finetune import LoraSpec
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from tests.costmodel.test_screen import compare, valid_plans

H100 = load_profile("h100-sxm-80gb")
DSV3 = get_preset("deepseek-v3").replace(num_layers=8)  # 3 dense, 5 MoE, one MTP depth
JOB = TrainingJob(seq_length=4096, global_batch_size=128)
PLAN = ParallelPlan(tp=2, pp=2, dp=16, ep=8, sequence_parallel=True, distributed_optimizer=True)


def test_the_last_stage_holds_its_mtp_layer() -> None:
    # layers 4..7 and the MTP depth's one MoE layer on stage 1; layers 0..3 on stage 0
    assert stage_weight_layers(DSV3, PLAN, 1) == 4 + 1
    assert stage_weight_layers(DSV3, PLAN, 0) == 4
    shared = get_preset("nemotron-3-nano").replace(
        mtp_num_layers=2, mtp_hybrid_pattern="*E", mtp_repeated_layer=True
    )
    plan = ParallelPlan(tp=1, pp=1, dp=8)
    # 52 decoder layers and one weight set of two layers for both depths
    assert stage_weight_layers(shared, plan, 0) == shared.num_layers + 2


def test_the_simulated_optimizer_step_covers_the_mtp_layer(monkeypatch) -> None:
    # optimizer_step_tensors: 8 per layer and 2 per local expert (256 / ep 8 = 32), plus the
    # tensors outside the layers: the final norm and the output layer, the MTP stage's
    # embedding copy, eh_proj, enorm, hnorm and the depth's final_layernorm (RMSNorm
    # weights; multi_token_prediction.py, gpt_model.py d98e8a64): stage 1 steps
    # (4 + 1)·(8 + 2·32) + 7 = 367 tensors, not the 4·72 + 2 = 290 of its decoder layers
    seen: list[int] = []
    real = optimizer_step.optimizer_step_time_s

    def spy(profile, **kwargs):
        seen.append(kwargs["num_tensors"])
        return real(profile, **kwargs)

    monkeypatch.setattr(optimizer_step, "optimizer_step_time_s", spy)
    placements = plan_placements(H100, PLAN)
    costs = chunk_costs(DSV3, JOB, PLAN, H100, comm_groups(placements), DEFAULT_OPTIONS)
    optimizer_step.stage_optimizer_s(DSV3, JOB, PLAN, H100, 1, costs[1], placements)
    assert seen == [367]


def test_megatron_fsdp_reduces_each_unit_module_once() -> None:
    # stage "l" holds 4 decoder layers and 1 MTP layer: n = 5 units (the MTP layer counted
    # once), each reduce-scattering 1/5 of 1e9 dense fp32 gradients:
    # 5·(1e-5 + 1e-9·4e9/5) = 4.00005 s
    one = np.ones(1)
    c = {
        "nl": 5 * one,
        "mtpl": one,
        "g_a": 1e-5 * one,
        "g_b": 1e-9 * one,
        "ge_a": 0 * one,
        "ge_b": 0 * one,
        "pld": 1e9 * one,
        "ple": 0 * one,
        "use_megatron_fsdp": one,
        "grads_sharded": one,
    }
    assert fsdp_reduce_per_microbatch_s(c, "l", 4.0)[0] == pytest.approx(4.00005, rel=1e-12)


@pytest.mark.parametrize("sequence_parallel", [True, False])
def test_eh_proj_gemm_and_collectives_by_hand(sequence_parallel: bool) -> None:
    # T = 4096 tokens, h = 7168, bf16, tp 2. eh_proj is 2h -> h column-parallel:
    # forward [4096, 14336] @ [14336, 3584]; its output gathered along h, an all-gather of
    # [T, h] = 4096·7168·2 = 58,720,256 bytes; with SP also the all-gather of its input
    # [T, 2h] = 117,440,512 bytes forward, the reduce-scatter of the input gradient and the
    # all-gather of [T, h] for scatter_to_sequence_parallel_region backward; without SP the
    # all-reduce of the input gradient [T, 2h]
    plan = PLAN.replace(sequence_parallel=sequence_parallel)
    groups = comm_groups(plan_placements(H100, plan))
    cost = mtp_depth_cost(DSV3, JOB, plan, H100, groups, DEFAULT_OPTIONS)
    emb_fwd, emb_bwd = embedding_cost(DSV3, JOB, plan, H100, groups, DEFAULT_OPTIONS)
    proj_fwd = cost.projection_forward
    assert cost.forward == emb_fwd.plus(proj_fwd)
    out_bytes, in_bytes = 58_720_256, 117_440_512
    if sequence_parallel:
        assert proj_fwd.tp_bytes == in_bytes + out_bytes
        assert cost.backward.tp_bytes - emb_bwd.tp_bytes == in_bytes + out_bytes
    else:
        assert proj_fwd.tp_bytes == out_bytes
        assert cost.backward.tp_bytes - emb_bwd.tp_bytes == in_bytes
    rows = 4096 / 2 if sequence_parallel else 4096
    gemm = ops.gemm_time_s(H100, 4096, 3584, 14336, "bf16")
    norms = 2 * ops.norm_time_s(H100, rows, 7168, 2, "forward")
    concat = ops.memory_bound_time_s(H100, 4 * 2 * rows * 7168)  # read and write [T', 2h]
    side_by_side = ops.memory_bound_time_s(H100, 2 * out_bytes)
    assert proj_fwd.compute_s == pytest.approx(gemm + norms + concat + side_by_side, rel=1e-12)
    gather = collective_time_s(H100, "all_gather", out_bytes, groups.tp)
    if sequence_parallel:
        gather += collective_time_s(H100, "all_gather", in_bytes, groups.tp)
    assert proj_fwd.tp_exposed_s == pytest.approx(gather, rel=1e-12)


def test_eh_proj_alone_without_tensor_parallelism() -> None:
    plan = ParallelPlan(tp=1, pp=2, dp=32, ep=8, distributed_optimizer=True)
    cost = mtp_depth_cost(DSV3, JOB, plan, H100)
    assert cost.projection_forward.tp_s == 0 and cost.backward.tp_s == 0
    gemm = ops.gemm_time_s(H100, 4096, 7168, 14336, "bf16")
    assert cost.projection_forward.compute_s > gemm


def test_a_lora_job_runs_no_eh_proj_weight_gradient() -> None:
    lora = LoraSpec(rank=16, alpha=32, targets=("linear_qkv",))
    trained = mtp_depth_cost(DSV3, JOB, PLAN, H100)
    frozen = mtp_depth_cost(DSV3, dataclasses.replace(JOB, lora=lora), PLAN, H100)
    wgrad = ops.gemm_time_s(H100, 14336, 3584, 4096, "bf16")  # (2h x T) @ (T x h/tp)
    emb = embedding_cost(DSV3, JOB, PLAN, H100)[1].compute_s  # no frozen-embedding backward
    assert trained.backward.compute_s - frozen.backward.compute_s == pytest.approx(
        wgrad + emb, rel=1e-12
    )


def test_an_nvfp4_job_runs_eh_proj_in_bf16() -> None:
    b200 = load_profile("b200")
    plan = ParallelPlan(tp=1, pp=2, dp=32, ep=8, distributed_optimizer=True)
    bf16 = mtp_depth_cost(DSV3, JOB, plan, b200)
    nvfp4 = mtp_depth_cost(DSV3, dataclasses.replace(JOB, precision="nvfp4"), plan, b200)
    assert nvfp4.projection_forward == bf16.projection_forward


def test_full_recompute_reruns_the_projection_not_the_embedding() -> None:
    # MultiTokenPredictionLayer._checkpointed_forward wraps _proj_and_transformer_layer:
    # the depth's layer and its norms, concatenation and eh_proj; _get_embeddings runs
    # before it
    plan = PLAN.replace(recompute="full")
    groups = comm_groups(plan_placements(H100, plan))
    depth = mtp_depth_cost(DSV3, JOB, plan, H100, groups, DEFAULT_OPTIONS)
    (kind,) = DSV3.mtp_depth_kinds()
    layer = layer_cost(DSV3, JOB, plan, H100, kind=kind, groups=groups)
    with_mtp = chunk_costs(DSV3, JOB, plan, H100, groups, DEFAULT_OPTIONS)[-1][-1]
    without = DSV3.replace(mtp_num_layers=0)
    base = chunk_costs(without, JOB, plan, H100, groups, DEFAULT_OPTIONS)[-1][-1]
    extra = with_mtp.recompute.compute_s - base.recompute.compute_s
    expected = layer.recompute.compute_s + depth.projection_forward.compute_s
    assert extra == pytest.approx(expected, rel=1e-12)
    selective = chunk_costs(DSV3, JOB, PLAN.replace(recompute="selective"), H100, groups)
    base_selective = chunk_costs(without, JOB, PLAN.replace(recompute="selective"), H100, groups)
    selective_extra = (
        selective[-1][-1].recompute.compute_s - base_selective[-1][-1].recompute.compute_s
    )
    selective_layer = layer_cost(
        DSV3, JOB, PLAN.replace(recompute="selective"), H100, kind=kind, groups=groups
    )
    assert selective_extra == pytest.approx(selective_layer.recompute.compute_s, rel=1e-12)


def test_screen_agrees_on_megatron_fsdp_with_an_mtp_layer() -> None:
    # the screen's unit count (n, the MTP layer once) matches the simulator's per-chunk
    # unit modules (costmodel.rank_params.chunk_weight_layers)
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=64)
    grid = {
        "tp": [1, 2],
        "pp": [1, 2],
        "ep": [8, 16],
        "micro_batch_size": [1, 2],
        "sequence_parallel": [True],
        "recompute": ["none", "selective", "full"],
        "distributed_optimizer": [False],
        "use_megatron_fsdp": [True],
        "data_parallel_sharding_strategy": ["optim_grads_params"],
        "overlap_grad_reduce": [True],
    }
    plans = valid_plans(DSV3, cluster, JOB, grid)[::2]
    assert len(plans) > 10
    time_err, mem_err = compare(DSV3, cluster, JOB, plans)
    assert np.max(time_err) < 0.01 and np.max(mem_err) < 1e-9


def test_a_lora_step_counts_each_stages_adapters_by_layer_kind(monkeypatch) -> None:
    # linear_qkv, linear_proj, linear_fc1, linear_fc2 on "MMMMMMM-" + "*-*-*-*-" and an MTP
    # depth "*-" at pp 2 (specs.finetune.layer_targets: an M layer holds none of them, a *
    # or - layer two): stage 0 holds 1·2 adapters, stage 1 8·2 + 2 + 2 = 20; two tensors
    # each (optimizer_step_tensors), 4 and 40, not the model's mean of 18/16 per layer
    lora = LoraSpec(rank=16, targets=("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"))
    model = get_preset("nemotron-h-8b").replace(
        num_layers=16,
        hybrid_layer_pattern="MMMMMMM-*-*-*-*-",
        mtp_num_layers=1,
        mtp_hybrid_pattern="*-",
    )
    plan = ParallelPlan(tp=1, pp=2, dp=4, distributed_optimizer=True)
    assert [stage_lora_adapters(model, plan, s, lora) for s in (0, 1)] == [2, 20]
    job = dataclasses.replace(JOB, global_batch_size=32, lora=lora)
    seen: list[int] = []
    real = optimizer_step.optimizer_step_time_s

    def spy(profile, **kwargs):
        seen.append(kwargs["num_tensors"])
        return real(profile, **kwargs)

    monkeypatch.setattr(optimizer_step, "optimizer_step_time_s", spy)
    placements = plan_placements(H100, plan)
    costs = chunk_costs(model, job, plan, H100, comm_groups(placements), DEFAULT_OPTIONS)
    for stage in (0, 1):
        optimizer_step.stage_optimizer_s(model, job, plan, H100, stage, costs[stage], placements)
    assert seen == [4, 40]
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=8)
    plans = [plan, ParallelPlan(tp=2, pp=2, dp=2, distributed_optimizer=True)]
    time_err, _ = compare(model, cluster, job, plans)
    assert np.max(time_err) < 0.02


def test_the_mtp_stage_all_reduces_its_embedding_copy_with_the_first() -> None:
    # finalize_model_grads all-reduces the word-embedding gradient between the first stage
    # and the MTP stage whenever mtp_num_layers is set (_get_shared_word_embedding_weight):
    # 129280 x 7168 / tp 2 = 463,339,520 fp32 gradients, 1,853,358,080 bytes, on stages 0
    # and 1 of DeepSeek-V3 (untied) at pp 2; none without MTP or at pp 1
    assert shared_word_embedding(DSV3)
    assert not shared_word_embedding(DSV3.replace(mtp_num_layers=0))

    def embedding_events(model, plan):
        sim = simulate_iteration(model, JOB, plan, H100, runtime=MegatronRuntime())
        return [
            [e[3] for e in tail.dp_events if e[0] == "embedding all_reduce"] for tail in sim.tails
        ]

    assert embedding_events(DSV3, PLAN) == [[1_853_358_080], [1_853_358_080]]
    assert embedding_events(DSV3.replace(mtp_num_layers=0), PLAN) == [[], []]
    single = ParallelPlan(tp=2, pp=1, dp=32, ep=8, sequence_parallel=True)
    assert embedding_events(DSV3, single.replace(distributed_optimizer=True)) == [[]]


def test_the_tensors_outside_the_layers_by_name() -> None:
    # gpt_model.py (self.embedding for pre_process or mtp_process, output_layer),
    # transformer_block.py (final_layernorm) and multi_token_prediction.py (eh_proj without
    # bias, enorm, hnorm, final_layernorm), d98e8a64; DeepSeek-V3 norms are RMSNorm weights
    assert outside_tensors(DSV3, PLAN, first=True, last=False) == (
        "embedding.word_embeddings.weight",
    )
    assert outside_tensors(DSV3, PLAN, first=False, last=True, mtp_layers=1) == (
        "embedding.word_embeddings.weight",  # the MTP stage's own copy
        "decoder.final_layernorm.weight",
        "output_layer.weight",
        "mtp.layers.0.eh_proj.weight",
        "mtp.layers.0.enorm.weight",
        "mtp.layers.0.hnorm.weight",
        "mtp.layers.0.final_layernorm.weight",
    )
    # one stage holds the embedding once; a middle stage nothing
    one_stage = ParallelPlan(tp=2, dp=32, ep=8)
    assert stage_outside_tensors(DSV3, one_stage, 0) == 1 + 2 + 4
    assert stage_outside_tensors(DSV3, PLAN.replace(pp=4, dp=8), 1) == 0


def test_layernorm_weights_biases_and_a_learned_position_table() -> None:
    gpt = get_preset("gpt-1.7b").replace(mtp_num_layers=2)  # LayerNorm, learned positions
    names = outside_tensors(gpt, ParallelPlan(pp=2), first=False, last=True, mtp_layers=2)
    assert len(names) == 2 + 2 + 1 + 2 * (1 + 3 * 2)  # embedding copy, norm, output, 2 sets
    assert "embedding.position_embeddings.weight" in names
    shared = gpt.replace(mtp_repeated_layer=True)
    assert (
        len(outside_tensors(shared, ParallelPlan(pp=2), first=False, last=True, mtp_layers=2)) == 12
    )


@pytest.mark.parametrize("optimizer", ["dist_muon", "muon"])
def test_screen_agrees_on_muon_with_an_mtp_layer(optimizer: str) -> None:
    # the MTP layer's and eh_proj's matrices, the embedding copy dealt whole
    # (costmodel.muon_sharding), in the screen's Muon columns and the simulator alike
    model = get_preset("mixtral-8x7b").replace(num_layers=8, mtp_num_layers=1)
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=16)
    job = TrainingJob(seq_length=4096, global_batch_size=64, optimizer=optimizer)
    grid = {"tp": [2, 4], "pp": [1, 2], "ep": [1, 4], "recompute": ["none", "full"]}
    plans = valid_plans(model, cluster, job, grid)
    assert len(plans) > 8
    time_err, mem_err = compare(model, cluster, job, plans)
    assert time_err.max() < 0.05
    assert mem_err.max() < 0.01


@pytest.mark.parametrize(("recompute", "regions"), [("none", 1 + 2), ("full", 1 + 1)])
def test_delayed_scaling_reduces_the_buffer_in_each_mtp_region(
    recompute: str, regions: int
) -> None:
    # _proj_and_transformer_layer enters get_fp8_context around _concat_embeddings and
    # around the layer: two fp8_autocast regions of the depth beside the chunk's, one under
    # full recompute (_checkpointed_forward's outer context for delayed scaling;
    # multi_token_prediction.py d98e8a64); the buffer holds eh_proj (1 module, 1 GEMM).
    # Without SP, where the two recipes' TP collectives agree (with it MXFP8 gathers its
    # scales as well: linear_pairs.sp_all_gather_bytes).
    plan = PLAN.replace(recompute=recompute, sequence_parallel=False)
    job = dataclasses.replace(JOB, precision="fp8")
    options = dataclasses.replace(DEFAULT_OPTIONS, fp8_recipe="delayed")
    groups = comm_groups(plan_placements(H100, plan))
    grid = plan_pipeline_chunks(DSV3, plan)
    (last,) = grid[1]
    assert last.mtp_layers == 1
    fp8 = stage_fp8_modules(DSV3, grid[1], plan.ep)
    layers = stage_fp8_modules(DSV3.replace(mtp_num_layers=0), grid[1], plan.ep)
    (depth_kind,) = DSV3.mtp_depth_kinds()
    depth = layer_fp8_modules(DSV3, kind=depth_kind, ep=plan.ep)
    assert fp8 == layers.plus(depth).plus(EH_PROJ_MODULES)
    forward, backward = delayed_scaling_pair(H100, fp8, groups.tp_dp_cp)
    mxfp8 = dataclasses.replace(DEFAULT_OPTIONS, fp8_recipe="mxfp8")  # no amax reduction
    bare = chunk_costs(DSV3, job, plan, H100, groups, mxfp8)[1][0]
    kept = chunk_costs(DSV3, job, plan, H100, groups, options)[1][0]
    assert kept.forward.tp_s - bare.forward.tp_s == pytest.approx(regions * forward.tp_s)
    assert kept.backward.tp_s - bare.backward.tp_s == pytest.approx(regions * backward.tp_s)
