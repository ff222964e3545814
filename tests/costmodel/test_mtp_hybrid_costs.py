"""Multi-token prediction on hybrid models in the Megatron runtime and the FLOPs count: each
depth computes its layers by kind plus an output layer and loss, repeated weights are held
once, the screen agrees with the simulator, and the model FLOPs follow Megatron-LM's
``hybrid_flops`` with MTP (megatron/training/training.py, d98e8a64)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from costmodel.activations import stage_activations
from costmodel.estimate import estimate_plan
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.flops import forward_flops_per_token, mtp_forward_flops_per_token
from costmodel.hardware_flops import (
    hardware_flops_per_iteration,
    mtp_recompute_forward_flops_per_token,
    recompute_forward_flops_per_token,
)
from costmodel.iteration_flops import model_flops_per_iteration
from costmodel.passes import comm_groups
from costmodel.rank_params import non_unit_params, stage_params
from costmodel.runtimes.megatron.fp8_scaling import (
    EH_PROJ_MODULES,
    layer_fp8_modules,
    stage_fp8_modules,
)
from costmodel.runtimes.megatron.layer_costs import layer_cost
from costmodel.runtimes.megatron.mtp_costs import mtp_depth_cost
from costmodel.runtimes.megatron.pricing import chunk_costs
from costmodel.runtimes.megatron.vocab_costs import logits_cost
from costmodel.schedules import plan_stage_chunks
from costmodel.topology import plan_placements
from profiles.store import load_profile
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.layer_kinds import HYBRID_SYMBOLS
from specs.model import ModelSpec
from specs.params import count_params
from specs.plan import ParallelPlan
from specs.presets import get_preset
from tests.costmodel.test_flops_hybrid import megatron_hybrid_flops
from tests.costmodel.test_screen import HYBRID_GRID, compare, valid_plans

H100 = load_profile("h100-sxm-80gb")
HYBRID = ModelSpec(
    name="hybrid",
    num_layers=16,
    hidden_size=2048,
    num_attention_heads=16,
    num_query_groups=4,
    ffn_hidden_size=8192,
    vocab_size=32000,
    hybrid_layer_pattern="M-M*M-M-" * 2,
)
JOB = TrainingJob(seq_length=4096, global_batch_size=64)
PLAN = ParallelPlan(tp=2, pp=2, dp=2, sequence_parallel=True, distributed_optimizer=True)
ATTENTION, MLP = HYBRID_SYMBOLS["*"], HYBRID_SYMBOLS["-"]


def with_mtp(depths: int, *, repeated: bool = False, model: ModelSpec = HYBRID) -> ModelSpec:
    if not depths:
        return model
    return model.replace(
        mtp_num_layers=depths, mtp_hybrid_pattern="*-", mtp_repeated_layer=repeated
    )


def last_chunk(model: ModelSpec, plan: ParallelPlan = PLAN):
    groups = comm_groups(plan_placements(H100, plan))
    return chunk_costs(model, JOB, plan, H100, groups, DEFAULT_OPTIONS)[-1][-1], groups


def test_a_depth_computes_its_layers_eh_proj_and_an_output_layer() -> None:
    base, groups = last_chunk(HYBRID)
    one, _ = last_chunk(with_mtp(1))
    attention = layer_cost(HYBRID, JOB, PLAN, H100, kind=ATTENTION, groups=groups)
    mlp = layer_cost(HYBRID, JOB, PLAN, H100, kind=MLP, groups=groups)
    logits_fwd, logits_bwd = logits_cost(HYBRID, JOB, PLAN, H100, groups, DEFAULT_OPTIONS)
    extra = mtp_depth_cost(HYBRID, JOB, PLAN, H100, groups, DEFAULT_OPTIONS)
    assert extra.forward.compute_s > 0 and extra.backward.compute_s > 0
    depth_fwd = attention.forward.compute_s + mlp.forward.compute_s + logits_fwd.compute_s
    depth_fwd += extra.forward.compute_s
    depth_bwd = attention.backward.compute_s + mlp.backward.compute_s + logits_bwd.compute_s
    depth_bwd += extra.backward.compute_s
    assert one.forward.compute_s - base.forward.compute_s == pytest.approx(depth_fwd, rel=1e-9)
    grads = one.backward.compute_s - base.backward.compute_s
    # plus accumulating the depth's gradients where the fusion is off
    assert grads == pytest.approx(depth_bwd, rel=0.02)


@pytest.mark.parametrize("repeated", [False, True])
def test_two_depths_compute_twice_one_depth(repeated: bool) -> None:
    base, _ = last_chunk(HYBRID)
    one, _ = last_chunk(with_mtp(1))
    two, _ = last_chunk(with_mtp(2, repeated=repeated))
    depth = one.forward.compute_s - base.forward.compute_s
    assert two.forward.compute_s - base.forward.compute_s == pytest.approx(2 * depth, rel=1e-9)
    depth_bwd = one.backward.compute_s - base.backward.compute_s
    assert two.backward.compute_s - base.backward.compute_s == pytest.approx(
        2 * depth_bwd, rel=0.02
    )


def test_repeated_weights_are_held_once() -> None:
    one, two = with_mtp(1), with_mtp(2)
    shared = with_mtp(2, repeated=True)
    last = PLAN.pp - 1
    assert stage_params(shared, PLAN, last) == stage_params(one, PLAN, last)
    assert stage_params(two, PLAN, last).dense > stage_params(one, PLAN, last).dense
    assert non_unit_params(shared, PLAN, last) == non_unit_params(one, PLAN, last)
    assert stage_params(shared, PLAN, 0) == stage_params(HYBRID, PLAN, 0)
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=8)
    memory = {m.name: estimate_plan(m, cluster, JOB, PLAN, H100).memory[last] for m in (one,)}
    shared_memory = estimate_plan(shared, cluster, JOB, PLAN, H100).memory[last]
    for part in ("weights_bytes", "gradients_bytes", "optimizer_bytes"):
        assert getattr(shared_memory, part) == getattr(memory["hybrid"], part)
    two_memory = estimate_plan(two, cluster, JOB, PLAN, H100).memory[last]
    assert two_memory.weights_bytes > shared_memory.weights_bytes


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_each_depth_saves_its_activations(recompute: str) -> None:
    plan = PLAN.replace(recompute=recompute)
    last = plan.pp - 1
    base = stage_activations(HYBRID, JOB, plan, last)
    one = stage_activations(with_mtp(1), JOB, plan, last)
    shared = stage_activations(with_mtp(2, repeated=True), JOB, plan, last)
    assert base.mtp_bytes == 0.0 and one.mtp_bytes > 0.0
    assert one.layers_bytes - base.layers_bytes == pytest.approx(one.mtp_bytes, rel=1e-12)
    assert shared.mtp_bytes == pytest.approx(2 * one.mtp_bytes, rel=1e-12)  # per depth
    assert stage_activations(with_mtp(2), JOB, plan, last).mtp_bytes == shared.mtp_bytes
    assert stage_activations(with_mtp(2), JOB, plan, 0) == stage_activations(HYBRID, JOB, plan, 0)
    if recompute == "full":
        # _checkpointed_forward keeps its two inputs (hnorm's and enorm's, 2·4096·2048/2 B
        # each); outside the checkpoint the embedding keeps its int64 ids and dropout mask
        # (8·4096 + 4096·2048/2 B), the output layer its input (2·4096·2048/2 B) and the
        # loss its fp32 logits (4·4096·32000/2 B) (multi_token_prediction.py d98e8a64)
        by_hand = 3 * 8_388_608 + 32_768 + 4_194_304 + 262_144_000
        assert one.mtp_bytes == by_hand == 291_536_896


def test_repeated_weights_keep_the_compute_and_shrink_the_step() -> None:
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=8)
    times = {
        key: estimate_plan(model, cluster, JOB, PLAN, H100).iteration_time_s
        for key, model in (
            ("one", with_mtp(1)),
            ("two", with_mtp(2)),
            ("shared", with_mtp(2, repeated=True)),
        )
    }
    assert times["one"] < times["shared"] <= times["two"]


def test_fp8_modules_count_each_held_weight_set() -> None:
    chunks = plan_stage_chunks(with_mtp(2), PLAN, PLAN.pp - 1)
    base = stage_fp8_modules(HYBRID, plan_stage_chunks(HYBRID, PLAN, PLAN.pp - 1), ep=1)
    # each weight set: eh_proj (one TE Linear) and its "*-" layers' modules
    depth = EH_PROJ_MODULES.plus(layer_fp8_modules(HYBRID, kind=ATTENTION, ep=1)).plus(
        layer_fp8_modules(HYBRID, kind=MLP, ep=1)
    )
    assert stage_fp8_modules(with_mtp(2), chunks, ep=1) == base.plus(depth).plus(depth)
    shared = with_mtp(2, repeated=True)
    shared_chunks = plan_stage_chunks(shared, PLAN, PLAN.pp - 1)
    assert stage_fp8_modules(shared, shared_chunks, ep=1) == base.plus(depth)


@pytest.mark.parametrize("repeated", [False, True])
def test_screen_agrees_with_the_simulator_on_a_hybrid_model_with_mtp(repeated: bool) -> None:
    model = with_mtp(2, repeated=repeated)
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=16)
    plans = valid_plans(model, cluster, JOB, HYBRID_GRID)[::4]
    assert len(plans) > 20
    time_err, mem_err = compare(model, cluster, JOB, plans)
    assert np.max(time_err) < 0.02
    assert np.max(mem_err) < 1e-4


def test_screen_prices_a_depth_kind_the_decoder_lacks() -> None:
    # the decoder has no E layer; its MTP depth does: the screen prices that kind too
    model = get_preset("nemotron-3-nano")
    mamba_only = model.replace(
        num_layers=8,
        hybrid_layer_pattern="M*MEM*ME",
        mtp_num_layers=1,
        mtp_hybrid_pattern="-",
        num_experts=8,
        moe_top_k=2,
    )
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=8)
    plans = [ParallelPlan.for_world(8, tp=2, pp=2), ParallelPlan.for_world(8, tp=1, pp=4)]
    time_err, mem_err = compare(mamba_only, cluster, JOB, plans)
    assert np.max(time_err) < 0.05 and np.max(mem_err) < 0.05


def test_nano_mtp_flops_golden() -> None:
    """Nemotron 3 Nano with two "*E" MTP depths, one 4096-token sequence, per token
    forward, by hand (h 2688, 32 heads of 128, 2 groups, top-6 experts of 1856, shared
    3712, vocabulary 131072), as Megatron-LM's ``hybrid_flops`` counts a depth:
      attention projections 4·128·32·(2688 + 2688·2/32)   =  46,792,704
      attention core        2·4096·128·32                 =  33,554,432
      experts               4·2688·(1856·6 + 3712)         = 159,645,696
      its output layer      2·2688·131072                  = 704,643,072
      one depth                                            = 944,635,904
    ``get_hybrid_layer_counts`` counts the "*E" part once per depth, whatever
    ``mtp_use_repeated_layer`` says, and ``hybrid_flops`` multiplies the logits by
    (1 + mtp_num_layers); no eh_proj term."""
    nano = get_preset("nemotron-3-nano")
    depth = 46_792_704 + 33_554_432 + 159_645_696 + 704_643_072
    assert depth == 944_635_904
    for repeated in (False, True):
        model = nano.replace(mtp_num_layers=2, mtp_hybrid_pattern="*E", mtp_repeated_layer=repeated)
        assert mtp_forward_flops_per_token(model, 4096) == 2 * depth
        per_token = forward_flops_per_token(model, 4096)
        assert per_token == forward_flops_per_token(nano, 4096) + 2 * depth
        megatron = (
            megatron_hybrid_flops(
                4096,
                4096,
                2688,
                (6 + 2, 23, 0, 23 + 2),
                kv_channels=128,
                heads=32,
                groups=2,
                ffn=1856,
                mamba_heads=64,
                mamba_groups=8,
                state=128,
                moe_ffn=1856,
                top_k=6,
                shared=3712,
                vocab=131072,
            )
            + 3 * 2 * 2 * 4096 * 2688 * 131072
        )  # the two depths' logits
        assert model_flops_per_iteration(model, 4096, 1) == pytest.approx(megatron, rel=1e-12)


def test_deepseek_v3_mtp_flops_golden() -> None:
    """DeepSeek-V3's one MTP depth, one 4096-token sequence, per token forward, by hand as
    Megatron-LM's ``transformer_flops`` counts it (megatron/training/training.py,
    d98e8a64: the MTP layer joins the MoE layers and the attention layers, "MTP norms and
    proj" 3h + 2h², logits x (1 + mtp_num_layers)); h 7168, 128 heads, q_lora 1536,
    kv_lora 512, d_qk 128, d_rope 64, d_v 128, top-8 experts of 2048 and a shared 2048,
    SwiGLU, vocabulary 129280 (unpadded, module docstring of costmodel.flops):
      MLA projections 2·(1536·(7168 + 128·192 + 1)
                         + 512·(7168 + 128·256 + 1) + 7168·64
                         + 128·128·7168)                    =   374,214,656
      attention core  2·(128·192/2 + 128·128/2)·4096          =   167,772,160
      experts         2·3·7168·(2048·8 + 2048)                =   792,723,456
      norms and proj  2·(3·7168 + 2·7168²)                    =   205,563,904
      its output layer 2·7168·129280                          = 1,853,358,080
      one depth                                               = 3,393,632,256"""
    model = get_preset("deepseek-v3")
    depth = 374_214_656 + 167_772_160 + 792_723_456 + 205_563_904 + 1_853_358_080
    assert depth == 3_393_632_256
    assert mtp_forward_flops_per_token(model, 4096) == depth
    without = dataclasses.replace(model, mtp_num_layers=0)
    per_token = forward_flops_per_token(model, 4096)
    assert per_token == pytest.approx(forward_flops_per_token(without, 4096) + depth, rel=1e-15)
    assert mtp_forward_flops_per_token(without, 4096) == 0.0
    assert count_params(model).mtp > 0


def test_full_recompute_reruns_each_depth_checkpoint_in_the_hardware_flops() -> None:
    """DeepSeek-V3's depth without its output layer (the golden above): MLA projections,
    attention core, experts, norms and proj = 1,540,274,176 FLOPs per token forward, rerun
    by _checkpointed_forward (multi_token_prediction.py d98e8a64); two depths twice."""
    model = get_preset("deepseek-v3")
    rerun = 374_214_656 + 167_772_160 + 792_723_456 + 205_563_904
    assert rerun == 1_540_274_176
    assert mtp_recompute_forward_flops_per_token(model, 4096) == rerun
    two = model.replace(mtp_num_layers=2)
    assert mtp_recompute_forward_flops_per_token(two, 4096) == 2 * rerun
    plan = ParallelPlan(recompute="full")
    without = model.replace(mtp_num_layers=0)
    full = recompute_forward_flops_per_token(model, plan, 4096)
    assert full == pytest.approx(recompute_forward_flops_per_token(without, plan, 4096) + rerun)
    job = TrainingJob(seq_length=4096, global_batch_size=8)
    extra = hardware_flops_per_iteration(model, job, plan) - model_flops_per_iteration(
        model, 4096, 8
    )
    assert extra == pytest.approx(full * 4096 * 8, rel=1e-12)
    # selective recompute reruns the depth's core attention, as the decoder layers'
    selective = ParallelPlan(recompute="selective")
    assert (
        recompute_forward_flops_per_token(model, selective, 4096)
        == recompute_forward_flops_per_token(without, selective, 4096) + 167_772_160
    )


def test_a_hybrid_depth_reruns_its_layers_without_eh_proj() -> None:
    # hybrid_flops counts no eh_proj and no norm, so neither does the rerun
    model = with_mtp(2)
    per_depth = mtp_forward_flops_per_token(model, 4096) / 2 - 2 * 2048 * 32000
    assert mtp_recompute_forward_flops_per_token(model, 4096) == pytest.approx(2 * per_depth)
