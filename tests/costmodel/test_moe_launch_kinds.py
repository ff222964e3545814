"""The two kinds of MoE host launch (costmodel.runtimes.megatron.moe_launches.MoeLaunches):
Python-level ones at ExecutionOptions.moe_host_launch_s, the per-expert C++ launches of
Transformer Engine's GroupedLinear at ExecutionOptions.moe_expert_launch_s, and the host
floor they price together."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.passes import CommGroups
from costmodel.runtimes.megatron.layer_costs import layer_cost
from costmodel.runtimes.megatron.moe_costs import moe_shape
from costmodel.runtimes.megatron.moe_launches import MoeLaunches, moe_host_launches
from costmodel.topology import strided_group_placement
from profiles.store import load_profile
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.layer_kinds import MOE_LAYER
from specs.plan import ParallelPlan
from specs.presets import get_preset

H100 = load_profile("h100-sxm-80gb")
QWEN = get_preset("qwen3-30b-a3b")  # 128 experts, top-8
JOB = TrainingJob(seq_length=4096, global_batch_size=64, precision="fp8")


@pytest.mark.parametrize(
    ("experts", "ep", "fp8", "fused", "dispatcher", "direction", "python", "expert"),
    [
        # Qwen3-Next 80B-A3B: 512 experts over ep 8 = 64 local. Python-level: the alltoall
        # dispatcher's 28 (moe_launches.FIXED_LAUNCHES: router 4, metadata 12, permutations
        # and all-to-alls 10, weighted activation 2) + general_grouped_gemm for FC1 and FC2
        # (grouped_linear.py _GroupedLinear.forward: 2) + _split_quantize of each input (2).
        # Per expert, from C++: gemm.cpp te_general_grouped_gemm -> cublaslt_gemm.cu
        # multi_stream_cublas_gemm, one nvte_cublas_gemm_v2 per expert for FC1 and FC2 (2),
        # and cast.cpp multi_tensor_quantize_impl, one quantize per expert slice (2).
        (512, 8, True, False, "alltoall", "forward", 28 + 2 + 2, 64 * (2 + 2)),
        # Its backward: 28 + dgrad and wgrad general_grouped_gemm per projection (4) +
        # _split_quantize of each output gradient (2); per expert dgrad and wgrad GEMMs of
        # both projections (4) and the two output-gradient slice quantizations (2).
        (512, 8, True, False, "alltoall", "backward", 28 + 4 + 2, 64 * (4 + 2)),
        # 16-bit: no _split_quantize calls and no slice quantizations.
        (128, 8, False, False, "alltoall", "forward", 28 + 2, 16 * 2),
        (128, 8, False, False, "alltoall", "backward", 28 + 4, 16 * 4),
        # flex (HybridEP): its own 21 forward / 14 backward Python-level launches
        # (moe_flex_launches.FLEX_FIXED_LAUNCHES); the experts' are unchanged. DeepSeek-V3,
        # 256 experts over ep 8 = 32 local.
        (256, 8, True, False, "flex", "forward", 21 + 4, 32 * 4),
        (256, 8, True, False, "flex", "backward", 14 + 6, 32 * 6),
        # The fused grouped MLP (forward_grouped_mlp.py): splits_to_offsets, group_quantize,
        # the FC1 GEMM-SwiGLU and the FC2 GEMM, each once whatever the experts (4); backward
        # group_quantize, FC2 dgrad-dSwiGLU, FC1 dgrad, two weight-gradient GEMMs (5).
        (512, 8, True, True, "alltoall", "forward", 28 + 4, 0),
        (512, 8, True, True, "flex", "backward", 14 + 5, 0),
    ],
)
def test_launch_counts_by_kind(experts, ep, fp8, fused, dispatcher, direction, python, expert):
    local = experts // ep
    launches = moe_host_launches(local, fp8, direction, fused_mlp=fused, dispatcher=dispatcher)
    assert (launches.python, launches.expert) == (python, expert)


def test_host_seconds_price_each_kind_at_its_own_rate():
    launches = MoeLaunches(python=32, expert=256)
    # 32 x 50 us + 256 x 10 us = 1.6 ms + 2.56 ms
    assert launches.host_s(50e-6, 10e-6) == pytest.approx(4.16e-3)
    assert launches.host_s(50e-6, 0.0) == pytest.approx(1.6e-3)
    assert launches.total == 288
    assert launches.minus(MoeLaunches(python=16, expert=0)) == MoeLaunches(python=16, expert=256)


def layer(options: ExecutionOptions, plan: ParallelPlan):
    ep = strided_group_placement(plan.ep, 1, gpus_per_node=8, scale_up_domain=8, nics_per_node=8)
    groups = CommGroups(ep=ep)
    return layer_cost(QWEN, JOB, plan, H100, kind=MOE_LAYER, groups=groups, options=options)


def test_a_host_bound_layer_lasts_its_python_launches_plus_its_per_expert_launches():
    # At 1 s per Python-level launch the host sets the pace of both passes: backward lasts
    # its launches' host time; the dropless forward lasts it plus the one launch the device
    # waits for after the token-count synchronization (moe_experts.forward_host_floor_s).
    plan = ParallelPlan(dp=8, ep=2)  # 128 experts over ep 2: 64 local experts
    local = moe_shape(QWEN, plan, JOB.seq_length).local_experts
    assert local == 64
    python_s, expert_s = 1.0, 0.01
    options = dataclasses.replace(
        DEFAULT_OPTIONS, moe_host_launch_s=python_s, moe_expert_launch_s=expert_s
    )
    cost = layer(options, plan)
    # FP8 alltoall: forward 32 Python-level + 256 per-expert, backward 34 + 384
    forward_host = 32 * python_s + 64 * 4 * expert_s
    backward_host = 34 * python_s + 64 * 6 * expert_s
    assert cost.forward.duration_s == pytest.approx(forward_host + python_s)
    assert cost.backward.duration_s == pytest.approx(backward_host)
    # The per-expert price moves each pass by its per-expert launches alone.
    dearer = layer(dataclasses.replace(options, moe_expert_launch_s=2 * expert_s), plan)
    assert dearer.backward.duration_s - cost.backward.duration_s == pytest.approx(384 * expert_s)
    assert dearer.forward.duration_s - cost.forward.duration_s == pytest.approx(256 * expert_s)


def test_a_negative_expert_launch_time_is_refused():
    with pytest.raises(SpecError, match="moe_expert_launch_s must be >= 0"):
        ExecutionOptions(moe_expert_launch_s=-1e-6)
