"""Megatron-core's optimizer CPU offload (`costmodel.optimizer_offload`,
`ExecutionOptions.optimizer_cpu_offload_fraction`): the offloaded share of the optimizer
state leaves the device, the host's Adam and copies are priced beside the device's step, and
Megatron-core's rules are enforced."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.compute import memory_bound_time_s
from costmodel.estimate import estimate_plan
from costmodel.execution import ExecutionOptions
from costmodel.execution_derived import optimizer_precision
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.optimizer_offload import (
    OFFLOAD_RULE,
    host_memory_Bps,
    host_optimizer_step_s,
    offload_violations,
)
from costmodel.optimizer_passes import grad_buffer_passes_time_s, optimizer_step_time_s
from costmodel.optimizer_state import adam_state_bytes
from costmodel.plan_frame import plans_frame
from costmodel.screen import screen_plans
from profiles.store import load_profile
from specs import ParallelPlan, TrainingJob
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.presets import get_preset

H100 = load_profile("h100-sxm-80gb")
MODEL = get_preset("llama3-8b")
CLUSTER = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=8)
JOB = TrainingJob(seq_length=4096, global_batch_size=64, precision="bf16")
PLAN = ParallelPlan(tp=1, pp=1, dp=8, micro_batch_size=1, distributed_optimizer=True)


def offload(fraction: float, overlap: bool = False) -> ExecutionOptions:
    return dataclasses.replace(
        DEFAULT_OPTIONS,
        precision_aware_optimizer=True,
        optimizer_cpu_offload_fraction=fraction,
        overlap_cpu_optimizer_d2h_h2d=overlap,
    )


@pytest.mark.parametrize(
    ("fraction", "expected"),
    [(0.5, 6_022_695_936.0), (1.0, 0.0)],
)
def test_offloaded_share_of_the_optimizer_state_leaves_the_device(fraction, expected):
    """Llama 3 8B holds 8,030,261,248 parameters: embedding and output layer 2 x 128256 x
    4096 = 1,050,673,152, 32 layers of 218,112,000 (attention 4096·(4096 + 2·1024 + 4096 +
    4096) = 41,943,040, SwiGLU 3 x 4096 x 14336 = 176,160,768, two norms 8,192) =
    6,979,584,000, the final norm 4,096. The distributed optimizer over dp 8 holds
    12 x 8,030,261,248 / 8 = 12,045,391,872 bytes (fp32 master, m, v); offloading a
    fraction f keeps (1 - f) of it: 6,022,695,936 at 0.5, none at 1. Weights (2 per
    parameter) and fp32 gradients (4) stay whole."""
    base = estimate_plan(MODEL, CLUSTER, JOB, PLAN, H100).memory[0]
    stage = estimate_plan(MODEL, CLUSTER, JOB, PLAN, H100, options=offload(fraction)).memory[0]
    assert base.optimizer_bytes == 12_045_391_872.0
    assert stage.optimizer_bytes == pytest.approx(expected, rel=1e-12)
    assert stage.weights_bytes == base.weights_bytes == 2 * 8_030_261_248
    assert stage.gradients_bytes == base.gradients_bytes == 4 * 8_030_261_248
    assert base.total_bytes - stage.total_bytes == pytest.approx(12_045_391_872.0 - expected)


def test_host_step_on_a_hand_computed_case():
    """One H100 rank, N = 1e9 offloaded parameters: each copy 4 x 1e9 B / 64e9 B/s
    (PCIe Gen5 x16 per direction) = 0.0625 s, the host AdamW 28 x 1e9 B / 76.8e9 B/s (two
    Xeon 8480C, 8 DDR5-4800 channels each, over 8 GPUs) = 0.36458 s; in series
    0.0625 + 0.36458 + 0.0625 = 0.48958 s, overlapped max(0.0625, 0.36458) = 0.36458 s."""
    assert host_memory_Bps(H100) == 76.8e9
    assert host_optimizer_step_s(H100, 1e9, overlap=False) == pytest.approx(
        0.0625 + 28 / 76.8 + 0.0625, rel=1e-12
    )
    assert host_optimizer_step_s(H100, 1e9, overlap=True) == pytest.approx(28 / 76.8, rel=1e-12)
    assert host_optimizer_step_s(H100, 0.0, overlap=False) == 0.0


def test_device_keeps_the_norm_and_the_zeroing_of_a_fully_offloaded_shard():
    """With the whole shard offloaded the device reads the shard's fp32 main gradients for
    the norm (4 per shard parameter) and zeroes the local buffer (4 per local parameter),
    in the step's four passes."""
    full = optimizer_step_time_s(
        H100,
        shard_params=1e9,
        local_params=8e9,
        mixed_precision=True,
        num_tensors=100,
        offloaded_params=1e9,
    )
    assert full == pytest.approx(memory_bound_time_s(H100, 4 * 1e9 + 4 * 8e9, num_ops=400))
    with pytest.raises(SpecError, match="offloaded_params"):
        optimizer_step_time_s(
            H100, shard_params=1e9, local_params=8e9, mixed_precision=True, num_tensors=1,
            offloaded_params=2e9,
        )  # fmt: skip


def test_step_is_the_slower_of_the_device_and_the_host():
    """The 8B shard over dp 8 is 1,003,782,656 parameters; offloaded whole with the overlap,
    the host's 28 B per parameter at 76.8 GB/s (0.366 s) outlasts the device's passes, and
    the step is that plus the gradient-buffer passes before the reduction (scale and NaN
    check, 3 x 4 B per local parameter on the device), which offload leaves alone."""
    shard = 8_030_261_248 / 8
    buffer_s = grad_buffer_passes_time_s(H100, 8_030_261_248, 4, scale=True, nan_check=True)
    est = estimate_plan(MODEL, CLUSTER, JOB, PLAN, H100, options=offload(1.0, overlap=True))
    host_s = 28 * shard / 76.8e9
    assert est.breakdown.optimizer_s == pytest.approx(host_s + buffer_s, rel=1e-9)
    serial = estimate_plan(MODEL, CLUSTER, JOB, PLAN, H100, options=offload(1.0))
    copies = 2 * 4 * shard / 64e9
    assert serial.breakdown.optimizer_s == pytest.approx(host_s + copies + buffer_s, rel=1e-9)
    base = estimate_plan(MODEL, CLUSTER, JOB, PLAN, H100)
    assert base.breakdown.optimizer_s < est.breakdown.optimizer_s


def bf16_moments_offload(fraction: float) -> ExecutionOptions:
    """The precision-aware optimizer with bf16 moments, ``fraction`` of the shard offloaded."""
    return dataclasses.replace(offload(fraction), exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16")


def test_offloaded_state_is_fp32_whatever_the_moment_dtypes():
    """Megatron-core's HybridDeviceOptimizer keeps fp32 master, m and v on the device and
    the host whatever --exp-avg-dtype and --exp-avg-sq-dtype say. The 8B shard over dp 8,
    N = 1,003,782,656: bf16 moments without offload hold 2 (int16 remainders) + 2 + 2 = 6
    bytes, 6,022,695,936; with a quarter offloaded the device keeps 12 x (1 - 0.25) = 9
    bytes, 9,034,043,904 (not 6 x 0.75 = 4,517,021,952)."""
    aware = dataclasses.replace(bf16_moments_offload(0.0))
    stage = estimate_plan(MODEL, CLUSTER, JOB, PLAN, H100, options=aware).memory[0]
    assert stage.optimizer_bytes == 6_022_695_936.0
    composed = bf16_moments_offload(0.25)
    stage = estimate_plan(MODEL, CLUSTER, JOB, PLAN, H100, options=composed).memory[0]
    assert stage.optimizer_bytes == 9_034_043_904.0


def test_offloaded_step_prices_the_fp32_state_on_the_device():
    """shard 1e9, local 8e9, bf16, one tensor, fp32 main gradients, a quarter offloaded:
    the device's Adam over the fp32 state reads the gradient (4), m and v (16), the master
    (8) and writes the bf16 copy (2), 30 per parameter less the offloaded 0.25e9's, plus
    the norm (4 per shard parameter) and the zeroing (4 per local one): 34e9 + 32e9 - 7.5e9
    = 58.5e9 bytes in 4 passes. The same bf16 moments without offload (Transformer
    Engine's FusedAdam, remainders, no fp32 gradient copy): 4 + 8 + 8 + 4 = 24 per shard
    parameter, 24e9 + 32e9 = 56e9 bytes."""
    shard, local = 1e9, 8e9
    composed = optimizer_precision(bf16_moments_offload(0.25))
    state = adam_state_bytes("bf16", composed)
    assert state == adam_state_bytes("bf16") and state.total_bytes == 12
    step = optimizer_step_time_s(
        H100, shard_params=shard, local_params=local, mixed_precision=True, num_tensors=1,
        state=state, offloaded_params=0.25 * shard,
    )  # fmt: skip
    assert step == pytest.approx(memory_bound_time_s(H100, 58.5e9, num_ops=4), rel=1e-12)
    aware = optimizer_precision(bf16_moments_offload(0.0))
    unloaded = optimizer_step_time_s(
        H100, shard_params=shard, local_params=local, mixed_precision=True, num_tensors=1,
        state=adam_state_bytes("bf16", aware),
    )  # fmt: skip
    assert unloaded == pytest.approx(memory_bound_time_s(H100, 56e9, num_ops=4), rel=1e-12)


def test_composed_step_is_the_host_part_where_it_is_slower():
    """The 8B shard over dp 8 with bf16 moments and a quarter offloaded, in series: the
    host's 0.25 x 1,003,782,656 = 250,945,664 parameters take 2 x 4 B over PCIe Gen5
    (64e9 B/s) and 28 B at 76.8e9 B/s, 0.0314 + 0.0915 = 0.1229 s, more than the device's
    passes; the step is that plus the gradient-buffer passes."""
    n = 8_030_261_248 / 8 * 0.25
    buffer_s = grad_buffer_passes_time_s(H100, 8_030_261_248, 4, scale=True, nan_check=True)
    est = estimate_plan(MODEL, CLUSTER, JOB, PLAN, H100, options=bf16_moments_offload(0.25))
    host_s = 2 * 4 * n / 64e9 + 28 * n / 76.8e9
    assert est.breakdown.optimizer_s == pytest.approx(host_s + buffer_s, rel=1e-9)


@pytest.mark.parametrize(
    "options", [offload(0.5), offload(1.0, overlap=True), bf16_moments_offload(0.25)]
)
def test_screen_agrees_with_the_simulator(options):
    plans = [PLAN, dataclasses.replace(PLAN, tp=2, dp=4)]
    screened = screen_plans(MODEL, CLUSTER, JOB, H100, plans_frame(plans), options=options)
    for i, plan in enumerate(plans):
        est = estimate_plan(MODEL, CLUSTER, JOB, plan, H100, options=options)
        assert float(screened["peak_memory_bytes"].iloc[i]) == pytest.approx(
            est.peak_memory_bytes, rel=0.02
        )
        assert float(screened["iteration_time_s"].iloc[i]) == pytest.approx(
            est.iteration_time_s, rel=0.05
        )


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"optimizer_cpu_offload_fraction": 1.5}, r"in \[0, 1\]"),
        ({"optimizer_cpu_offload_fraction": -0.1}, r"in \[0, 1\]"),
        ({"optimizer_cpu_offload_fraction": 1.0, "runtime": "torch"}, "runtime megatron"),
        (
            {
                "optimizer_cpu_offload_fraction": 1.0,
                "precision_aware_optimizer": True,
                "fp8_param": True,
                "fp8_recipe": "mxfp8",
            },
            "fp8_recipe 'delayed'",
        ),
        (
            {"optimizer_cpu_offload_fraction": 0.5},
            r"needs the precision-aware optimizer .*optimizer_cpu_offload_fraction 0\.5 with "
            r"precision_aware_optimizer False: give --use-precision-aware-optimizer",
        ),
    ],
)
def test_options_refuse_what_megatron_core_refuses(fields, match):
    with pytest.raises(SpecError, match=match):
        ExecutionOptions(**fields)


def test_fp8_parameters_with_delayed_scaling_are_accepted():
    ExecutionOptions(
        optimizer_cpu_offload_fraction=1.0,
        precision_aware_optimizer=True,
        fp8_param=True,
        fp8_recipe="delayed",
    )


def test_offload_needs_the_distributed_optimizer():
    plain = dataclasses.replace(PLAN, distributed_optimizer=False)
    (violation,) = offload_violations(plain, 1.0)
    assert violation.rule == OFFLOAD_RULE
    assert "--use-distributed-optimizer" in violation.message
    assert offload_violations(PLAN, 1.0) == []
    assert offload_violations(plain, 0.0) == []


def test_a_device_without_a_stated_host_is_refused():
    with pytest.raises(SpecError, match="no host memory bandwidth"):
        host_memory_Bps(load_profile("a100-sxm-80gb"))


def test_grace_host_over_nvlink_c2c():
    """GB200, N = 1e9: each copy 4e9 B / 450e9 B/s (NVLink-C2C per direction) = 0.008889 s,
    the host AdamW 28e9 B / 256e9 B/s (one Grace, 512 GB/s, per two GPUs) = 0.109375 s; in
    series 0.127153 s, overlapped 0.109375 s."""
    gb200 = load_profile("gb200-nvl72")
    assert host_memory_Bps(gb200) == 256e9
    assert host_optimizer_step_s(gb200, 1e9, overlap=False) == pytest.approx(
        2 * 4 / 450 + 28 / 256, rel=1e-12
    )
    assert host_optimizer_step_s(gb200, 1e9, overlap=True) == pytest.approx(28 / 256, rel=1e-12)
