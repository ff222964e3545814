"""Latent MoE (``ModelSpec.moe_latent_size``) in the cost model: Megatron-LM's FLOPs worked
by hand, the replicated projections per rank, the routed experts' GEMM work and exchanged
bytes at ℓ/h of the same model without latent, the saved tensors and dispatch buffer at ℓ,
the FP8 modules, the screen against the simulator, and the torch runtime's refusal."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from costmodel import compute
from costmodel.estimate import simulate_plan
from costmodel.execution_presets import DEFAULT_OPTIONS, TORCH_OPTIONS
from costmodel.flops import FORWARD_BACKWARD_FACTOR, mlp_forward_flops_per_token
from costmodel.iteration_flops import model_flops_per_iteration
from costmodel.layer_activations import layer_activations
from costmodel.megatron_estimator import megatron_theoretical_memory
from costmodel.memory import memory_per_stage
from costmodel.optimizer_muon import layer_matrices
from costmodel.passes import CommGroups
from costmodel.rank_params import layer_params_per_rank
from costmodel.runtimes.megatron.fp8_scaling import layer_fp8_modules
from costmodel.runtimes.megatron.layer_costs import layer_cost
from costmodel.runtimes.megatron.moe_costs import moe_shape, routed_experts
from costmodel.runtimes.megatron.moe_latent import latent_launches
from costmodel.runtimes.torch.runtime import TorchRuntime
from costmodel.topology import strided_group_placement
from profiles.store import load_profile
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.layer_kinds import MOE_LAYER
from specs.plan import ParallelPlan
from specs.presets import get_preset
from tests.costmodel.test_screen import assert_screen_agrees
from tests.specs.test_latent_moe import SUPER_LAYER

H100 = load_profile("h100-sxm-80gb")
JOB = TrainingJob(seq_length=4096, global_batch_size=64)
QWEN = get_preset("qwen3-30b-a3b")  # h 2048, 128 experts of 768, top-8, SwiGLU
LATENT = 512
QWEN_LATENT = QWEN.replace(name="qwen3-latent", moe_latent_size=LATENT)
# A small hybrid latent MoE model: Mamba-2, attention and E layers, a shared expert.
HYBRID_LATENT = get_preset("nemotron-3-nano").replace(
    name="nano-latent",
    num_layers=16,
    hybrid_layer_pattern="MEM*" * 4,
    num_experts=32,
    moe_latent_size=1024,
)


def ep_group(size: int):
    return strided_group_placement(size, 1, gpus_per_node=8, scale_up_domain=8, nics_per_node=8)


def test_flops_of_one_latent_layer_worked_by_hand() -> None:
    # Megatron-LM moe_layer_flops (training.py, d98e8a64) per token, non-gated (scale 1):
    # routed 4·ℓ·F·k = 4·1024·2688·22, projections 4·h·ℓ = 4·4096·1024, shared
    # 4·h·F_shared = 4·4096·5376; the hybrid path multiplies the forward by 3.
    routed, projections, shared = 242_221_056, 16_777_216, 88_080_384
    assert routed == 4 * 1024 * 2688 * 22 and projections == 4 * 4096 * 1024
    assert shared == 4 * 4096 * 5376
    assert mlp_forward_flops_per_token(SUPER_LAYER, 0) == routed + projections + shared
    logits = 3 * 2 * 4096 * 1024  # the output layer, 2·h·V forward, V = 1024
    assert model_flops_per_iteration(SUPER_LAYER, 1, 1) == pytest.approx(
        3 * (routed + projections + shared) + logits, rel=1e-15
    )


def test_transformer_flops_follow_megatrons_gpt_formula() -> None:
    # transformer_flops (megatron-facts.md §1.3): the routed part scaled by ℓ/h plus
    # 6·h·2ℓ per token, fwd+bwd; SwiGLU f = 3, no shared expert in Qwen3-30B-A3B.
    h, f, top_k, ffn = 2048, 3, 8, 768
    base = mlp_forward_flops_per_token(QWEN, 0) * FORWARD_BACKWARD_FACTOR
    latent = mlp_forward_flops_per_token(QWEN_LATENT, 0) * FORWARD_BACKWARD_FACTOR
    assert base == 6 * h * ffn * top_k * f
    assert latent == pytest.approx(base * LATENT / h + 6 * h * 2 * LATENT, rel=1e-15)


def test_latent_projections_are_replicated_over_tp_and_not_expert_sharded() -> None:
    plan = ParallelPlan(tp=4, ep=8, etp=1, dp=8)
    lat = layer_params_per_rank(HYBRID_LATENT, plan, 1)  # an E layer
    base = layer_params_per_rank(HYBRID_LATENT.replace(moe_latent_size=None), plan, 1)
    h, latent, experts, ffn = 2688, 1024, 32, 1856
    projections = 2 * h * latent
    assert lat.dense - base.dense == pytest.approx(projections, rel=1e-15)
    assert lat.expert == pytest.approx(experts * 2 * latent * ffn / 8, rel=1e-15)
    assert base.expert == pytest.approx(experts * 2 * h * ffn / 8, rel=1e-15)
    assert lat.linear == pytest.approx(lat.dense - h + lat.expert - h * experts, rel=1e-15)


def _gemm_flops(monkeypatch, model, plan, tokens, dispatcher="alltoall"):
    """(recorded GEMM FLOPs, forward PassCost, backward PassCost) of `routed_experts`."""
    calls: list[tuple[int, int, int, int]] = []
    batched = compute.batched_gemm_time_s

    def record(profile, count, m, n, k, dtype):
        calls.append((count, m, n, k))
        return batched(profile, count, m, n, k, dtype)

    monkeypatch.setattr(compute, "batched_gemm_time_s", record)
    options = dataclasses.replace(DEFAULT_OPTIONS, moe_dispatcher=dispatcher)
    groups = CommGroups(ep=ep_group(plan.ep))
    forward, backward, _, _ = routed_experts(model, plan, H100, tokens, 2, "bf16", groups, options)
    monkeypatch.setattr(compute, "batched_gemm_time_s", batched)
    return sum(2 * c * m * n * k for c, m, n, k in calls), forward, backward


@pytest.mark.parametrize("plan", [ParallelPlan(ep=8, dp=8), ParallelPlan(ep=4, etp=2, dp=8)])
def test_expert_gemm_work_scales_with_latent_over_hidden(monkeypatch, plan) -> None:
    tokens = 4096
    h, n_exp = QWEN.hidden_size, QWEN.num_experts
    base, _, _ = _gemm_flops(monkeypatch, QWEN, plan, tokens)
    lat, _, _ = _gemm_flops(monkeypatch, QWEN_LATENT, plan, tokens)
    router = 3 * 2 * tokens * n_exp * h  # forward, dgrad, wgrad of [T, h] x [h, E]
    projections = 3 * 2 * (2 * tokens * h * LATENT)  # h -> ℓ and ℓ -> h, three GEMMs each
    assert lat - router - projections == pytest.approx((base - router) * LATENT / h, rel=1e-12)


@pytest.mark.parametrize("dispatcher", ["alltoall", "flex", "allgather"])
def test_exchanged_bytes_scale_with_latent_over_hidden(monkeypatch, dispatcher) -> None:
    plan, tokens = ParallelPlan(ep=8, dp=8), 4096
    h = QWEN.hidden_size
    _, _, base = _gemm_flops(monkeypatch, QWEN, plan, tokens, dispatcher)
    _, _, lat = _gemm_flops(monkeypatch, QWEN_LATENT, plan, tokens, dispatcher)
    # the backward exchanges no token counts; what does not scale is the routing metadata
    rows = moe_shape(QWEN, plan, tokens).rows
    fixed = {
        "alltoall": rows * 4,  # fp32 probabilities, one per row
        "flex": 0.0,
        "allgather": tokens * plan.ep * QWEN.num_experts * 5,  # fp32 probs + routing map
    }[dispatcher]
    assert lat.ep_bytes - fixed == pytest.approx((base.ep_bytes - fixed) * LATENT / h, rel=1e-12)
    assert lat.ep_bytes < base.ep_bytes


def test_saved_tensors_and_dispatch_buffer_at_latent_width() -> None:
    plan = ParallelPlan(tp=2, ep=8, dp=8, sequence_parallel=True)
    base = dict(layer_activations(QWEN, JOB, plan, 0).tensors)
    lat = dict(layer_activations(QWEN_LATENT, JOB, plan, 0).tensors)
    h, tokens = QWEN.hidden_size, JOB.seq_length / 2  # the rank's tokens under SP
    assert lat["expert_input"] == pytest.approx(base["expert_input"] * LATENT / h, rel=1e-15)
    assert lat["latent_fc2_input"] == 2 * tokens * LATENT  # the combined ℓ-wide rows, bf16
    assert lat["latent_fc1_input"] == 0.0  # bf16: the norm output fc1_input already counts
    assert {k: v for k, v in lat.items() if not k.startswith(("latent_", "expert_input"))} == {
        k: v for k, v in base.items() if k != "expert_input"
    }
    fp8 = dataclasses.replace(JOB, precision="fp8")
    lat8 = dict(layer_activations(QWEN_LATENT, fp8, plan, 0).tensors)
    assert lat8["latent_fc1_input"] == tokens * h  # its own 1-byte copy
    assert lat8["latent_fc2_input"] == tokens * LATENT
    rows = QWEN.moe_top_k * tokens
    base_buf = memory_per_stage(QWEN, JOB, plan)[0].comm_buffers_bytes
    lat_buf = memory_per_stage(QWEN_LATENT, JOB, plan)[0].comm_buffers_bytes
    assert base_buf - lat_buf == pytest.approx(2 * rows * (h - LATENT), rel=1e-12)


def test_latent_projections_are_two_more_fp8_modules() -> None:
    base = layer_fp8_modules(QWEN, kind=MOE_LAYER, ep=8)
    lat = layer_fp8_modules(QWEN_LATENT, kind=MOE_LAYER, ep=8)
    assert (lat.modules - base.modules, lat.gemms - base.gemms) == (2, 2)


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_screen_agrees_with_the_simulator_on_a_latent_moe_model(precision) -> None:
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=16)
    job = TrainingJob(seq_length=4096, global_batch_size=64, precision=precision)
    grid = {
        "tp": [1, 2],
        "pp": [1, 2],
        "vpp": [1, 2],
        "ep": [1, 4, 8],
        "micro_batch_size": [1, 2],
        "sequence_parallel": [True],
        "recompute": ["none", "selective", "full"],
        "distributed_optimizer": [True],
        "overlap_grad_reduce": [True],
    }
    assert_screen_agrees(HYBRID_LATENT, cluster, job, grid, every=2, at_least=20)


def test_the_torch_runtime_refuses_a_latent_moe_model() -> None:
    cluster = ClusterSpec(hardware="cpu-generic", num_gpus=1)
    with pytest.raises(SpecError, match=r"\[latent_moe_not_in_executor\]"):
        TorchRuntime().memory(QWEN_LATENT, JOB, ParallelPlan())
    with pytest.raises(SpecError, match="use --runtime megatron"):
        TorchRuntime().screen(QWEN_LATENT, cluster, JOB, H100, pd.DataFrame())
    with pytest.raises(SpecError, match="latent_moe_not_in_executor"):
        simulate_plan(
            QWEN_LATENT, cluster, JOB, ParallelPlan(), H100, options=TORCH_OPTIONS,
            timeline=False,
        )  # fmt: skip


def test_muon_steps_the_projections_and_the_latent_wide_experts() -> None:
    plan = ParallelPlan(ep=8, etp=1, dp=8)
    mats = layer_matrices(QWEN_LATENT, plan, True)
    h, ffn = QWEN.hidden_size, QWEN.expert_ffn_hidden_size
    shapes = {(m.rows, m.cols, m.expert) for m in mats}
    assert {(LATENT, h, False), (h, LATENT, False)} <= shapes  # the two projections
    assert {(2 * ffn, LATENT, True), (LATENT, ffn, True)} <= shapes  # each expert's fc1, fc2
    muon_params = sum(m.params for m in mats)
    base = sum(m.params for m in layer_matrices(QWEN, plan, True))
    per_rank = layer_params_per_rank(QWEN_LATENT, plan, 0)
    per_rank_base = layer_params_per_rank(QWEN, plan, 0)
    # Muon's matrices change exactly as the rank's parameters do (norms are not matrices)
    assert muon_params - base == pytest.approx(
        per_rank.dense + per_rank.expert - per_rank_base.dense - per_rank_base.expert, rel=1e-12
    )


def test_projection_launches_and_their_cuda_graph_capture() -> None:
    none = latent_launches(QWEN, False, frozenset())
    assert (none.forward, none.backward, none.pre_sync) == (0, 0, 0)
    bf16 = latent_launches(QWEN_LATENT, False, frozenset())
    assert (bf16.forward, bf16.backward, bf16.pre_sync, bf16.captured_forward) == (2, 4, 1, 0)
    fp8 = latent_launches(QWEN_LATENT, True, frozenset({"moe_router", "moe_preprocess"}))
    assert (fp8.forward, fp8.backward, fp8.pre_sync) == (4, 6, 2)
    assert (fp8.captured_forward, fp8.captured_backward) == (2, 0)  # fc1_latent_proj only
    whole = latent_launches(QWEN_LATENT, True, frozenset({"moe"}))
    assert (whole.captured_forward, whole.captured_backward) == (4, 6)


def test_a_host_bound_layer_pays_the_projection_launches() -> None:
    # at 1 s a launch the host sets the pace: each pass lasts its launches (module
    # docstring of moe_launches), so the latent layer takes 2 forward and 4 backward more
    options = dataclasses.replace(DEFAULT_OPTIONS, moe_host_launch_s=1.0)
    plan = ParallelPlan(ep=8, dp=8)
    groups = CommGroups(ep=ep_group(8))
    base = layer_cost(QWEN, JOB, plan, H100, kind=MOE_LAYER, groups=groups, options=options)
    lat = layer_cost(QWEN_LATENT, JOB, plan, H100, kind=MOE_LAYER, groups=groups, options=options)
    assert lat.forward.duration_s - base.forward.duration_s == pytest.approx(2.0, rel=1e-9)
    assert lat.backward.duration_s - base.backward.duration_s == pytest.approx(4.0, rel=1e-9)


def test_megatrons_own_estimator_counts_the_latent_layer() -> None:
    # theoretical_memory_usage.py (megatron-facts.md §2.1): routed 2·ℓ·F·E·3/2 divided by
    # ep·etp, latent projections 2·h·ℓ in the replicated part (not divided by tp), 18 bytes a
    # parameter without the distributed optimizer; Qwen3-30B-A3B: 48 MoE layers, SwiGLU.
    plan = ParallelPlan(tp=2, ep=8, etp=1, dp=8)
    base, _ = megatron_theoretical_memory(QWEN, JOB, plan)
    lat, _ = megatron_theoretical_memory(QWEN_LATENT, JOB, plan)
    h, ffn, experts, layers = 2048, 768, 128, 48
    routed = layers * 2 * (LATENT - h) * ffn * experts * 1.5 / 8
    projections = layers * 2 * h * LATENT
    assert lat - base == pytest.approx(18 * (routed + projections), rel=1e-12)
