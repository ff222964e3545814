"""NVFP4 jobs (``precision="nvfp4"``): fp4 GEMMs on a Blackwell profile, the quantization
passes, the saved GEMM inputs and weight storage in NVFP4 bytes, the unfitted fp4 rate
factor, and the refusals on devices and runtimes without NVFP4.

Byte counts are worked from the format (Transformer Engine
``docs/features/low_precision_training/nvfp4/nvfp4.rst``; arXiv 2509.25149): 0.5 byte of
E2M1 data plus one E4M3 scale byte per 16 elements, 0.5625 bytes per copy.
"""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.activation_shard import activation_shard
from costmodel.compute import (
    NVFP4_BYTES,
    NVFP4_DEVICE_RULE,
    gemm_dtype,
    gemm_time_s,
    memory_bound_time_s,
)
from costmodel.estimate import estimate_plan
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS, framework_profile, runtime_options
from costmodel.fitted_rates import FP4_GEMM_RATE_FACTORS, fp4_gemm_rate_factor
from costmodel.fp8_quantization import (
    fp8_cast_bytes_per_element,
    fp8_quantize_time_s,
    norm_quantization,
    operand_recipe,
)
from costmodel.layer_activations import layer_activations
from costmodel.memory_allowances import Fp8WeightStorage
from costmodel.optimizer_state import OptimizerPrecision, adam_state_bytes
from costmodel.runtimes.torch.runtime import TORCH_NVFP4_RULE
from profiles.store import load_profile
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset

B200 = load_profile("b200")
MODEL = get_preset("llama3-8b")
NVFP4 = TrainingJob(seq_length=4096, global_batch_size=64, precision="nvfp4")
FP8 = dataclasses.replace(NVFP4, precision="fp8")
PLAN = ParallelPlan(tp=2, pp=1, dp=4, micro_batch_size=1, sequence_parallel=True)


def test_nvfp4_gemms_are_fp4_and_run_at_the_fp4_peak_on_large_shapes() -> None:
    assert gemm_dtype("nvfp4") == "fp4"
    n = 16384  # 8.8 TFLOP: past the last point of both curves, compute-bound
    fp8 = gemm_time_s(B200, n, n, n, "fp8")
    fp4 = gemm_time_s(B200, n, n, n, "fp4")
    peaks = B200.device.peak_tflops
    assert fp8 / fp4 == pytest.approx(peaks["fp4"] / peaks["fp8"], rel=1e-9)


def test_nvfp4_operand_cast_moves_two_nvfp4_copies_after_an_amax_read() -> None:
    assert NVFP4_BYTES == 0.5625
    assert operand_recipe("fp4", "delayed") == "nvfp4"
    assert operand_recipe("fp8", "tensorwise") == "tensorwise"
    # read 2 (bf16), write row-wise and column-wise NVFP4 copies (Hadamard inside the cast)
    assert fp8_cast_bytes_per_element(2, recipe="nvfp4") == 2 + 2 * 0.5625
    for cudnn in (False, True):  # post-Hadamard amax: TE's norm writes bf16, quantize follows
        path = norm_quantization("nvfp4", cudnn_norm=cudnn, rows=4096, hidden=4096)
        assert path == "separate"
    elements = 4096 * 4096
    expected = memory_bound_time_s(B200, 3.125 * elements) + memory_bound_time_s(
        B200, 2.0 * elements
    )
    assert fp8_quantize_time_s(B200, elements, 2, recipe="nvfp4") == pytest.approx(expected)


def test_nvfp4_casts_before_te_2_14_read_the_operand_once_per_copy() -> None:
    # TE 5671fd36 NVFP4Quantizer::quantize_impl: nvte_quantize_v2 (row-wise) and
    # nvte_hadamard_transform_cast_fusion_columnwise each read the bf16 operand
    assert fp8_cast_bytes_per_element(2, recipe="nvfp4", fused_rht=False) == 4 + 2 * 0.5625
    assert fp8_cast_bytes_per_element(2, recipe="nvfp4", copies=1, fused_rht=False) == 2.5625
    assert fp8_cast_bytes_per_element(2, recipe="tensorwise", fused_rht=False) == 4
    elements = 4096 * 4096
    split = fp8_quantize_time_s(B200, elements, 2, recipe="nvfp4", fused_rht=False)
    fused = fp8_quantize_time_s(B200, elements, 2, recipe="nvfp4")
    assert split - fused == pytest.approx(
        memory_bound_time_s(B200, 5.125 * elements) - memory_bound_time_s(B200, 3.125 * elements)
    )
    two_kernels = dataclasses.replace(DEFAULT_OPTIONS, nvfp4_fused_rht_cast=False)
    cluster = ClusterSpec(hardware="b200", num_gpus=8)
    slow = estimate_plan(MODEL, cluster, NVFP4, PLAN, B200, options=two_kernels)
    fast = estimate_plan(MODEL, cluster, NVFP4, PLAN, B200)
    assert slow.iteration_time_s > fast.iteration_time_s
    fp8_slow = estimate_plan(MODEL, cluster, FP8, PLAN, B200, options=two_kernels)
    assert (
        fp8_slow.iteration_time_s == estimate_plan(MODEL, cluster, FP8, PLAN, B200).iteration_time_s
    )


def test_nvfp4_refuses_the_fused_norm_paths() -> None:
    with pytest.raises(SpecError, match="separate path"):
        fp8_cast_bytes_per_element(2, recipe="nvfp4", norm="fused")


@pytest.mark.parametrize(
    ("fp4_param", "param", "cache", "gather", "shard"),
    [
        (True, 1.125, 0.0, 0.5, 0.5),  # NVFP4 parameters, packed E2M1 row-wise data gathered
        (False, 2.0, 1.125, 2.0, 2.0),  # bf16 parameters + TE's cached NVFP4 copy
    ],
)
def test_nvfp4_weight_storage_bytes(fp4_param, param, cache, gather, shard) -> None:
    storage = Fp8WeightStorage(fp4_param=fp4_param, tn_gemm_only=False)
    assert storage.param_bytes(NVFP4) == param
    assert storage.cache_bytes(NVFP4) == cache
    assert storage.gather_bytes(NVFP4) == gather
    assert storage.shard_bytes(NVFP4) == shard
    assert storage.linear_bytes(NVFP4) == param + cache


def test_fp4_param_leaves_fp8_jobs_alone() -> None:
    on, off = Fp8WeightStorage(fp4_param=True), Fp8WeightStorage(fp4_param=False)
    for method in ("param_bytes", "cache_bytes", "gather_bytes", "shard_bytes"):
        assert getattr(on, method)(FP8) == getattr(off, method)(FP8)


def test_saved_gemm_inputs_are_nvfp4_copies() -> None:
    nv = activation_shard(NVFP4, PLAN)
    assert nv.gemm_input_bytes == 0.5625
    assert nv.proj_saves_input  # Megatron-core: set_save_original_input under fp4
    fp8 = layer_activations(MODEL, FP8, PLAN, 0)
    fp4 = layer_activations(MODEL, NVFP4, PLAN, 0)
    fp8_tensors, fp4_tensors = dict(fp8.tensors), dict(fp4.tensors)
    tokens, h = 4096, MODEL.hidden_size
    assert fp4_tensors["qkv_input"] == 0.5625 * tokens * h / PLAN.tp
    assert fp8_tensors["qkv_input"] == 1.0 * tokens * h / PLAN.tp


def test_adam_master_weights_of_nvfp4_parameters_are_whole_fp32() -> None:
    aware = OptimizerPrecision(precision_aware=True, exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16")
    nvfp4_params = adam_state_bytes("nvfp4", aware, fp4_param=True)
    bf16_params = adam_state_bytes("nvfp4", aware, fp4_param=False)
    assert (nvfp4_params.master_bytes, nvfp4_params.param_remainders) == (4, False)
    assert (bf16_params.master_bytes, bf16_params.param_remainders) == (2, True)


def test_fp4_rate_factor_is_the_fitted_one_of_the_generation_and_scales_the_fp4_curve() -> None:
    gb300 = load_profile("gb300-nvl72")
    assert fp4_gemm_rate_factor(B200) == FP4_GEMM_RATE_FACTORS["blackwell"]
    assert fp4_gemm_rate_factor(gb300) == FP4_GEMM_RATE_FACTORS["blackwell_ultra"]
    assert fp4_gemm_rate_factor(B200, 0.9) == 0.9
    options = dataclasses.replace(DEFAULT_OPTIONS, fp4_gemm_rate_factor=0.5)
    priced = framework_profile(B200, options)
    raw, scaled = B200.compute.gemm_efficiency["fp4"], priced.compute.gemm_efficiency["fp4"]
    assert [p.efficiency for p in scaled] == pytest.approx([p.efficiency * 0.5 for p in raw])


@pytest.mark.parametrize("factor", [0.0, 1.5])
def test_fp4_rate_factor_outside_the_unit_interval_is_refused(factor) -> None:
    with pytest.raises(SpecError, match="fp4_gemm_rate_factor must be in"):
        ExecutionOptions(fp4_gemm_rate_factor=factor)


def test_nvfp4_prices_faster_than_fp8_on_blackwell() -> None:
    cluster = ClusterSpec(hardware="b200", num_gpus=8)
    fp8 = estimate_plan(MODEL, cluster, FP8, PLAN, B200)
    fp4 = estimate_plan(MODEL, cluster, NVFP4, PLAN, B200)
    assert fp4.breakdown.compute_forward_s < fp8.breakdown.compute_forward_s


def test_nvfp4_on_a_device_without_fp4_is_refused_with_rule_values_and_fix() -> None:
    h100 = load_profile("h100-sxm-80gb")
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=8)
    with pytest.raises(SpecError) as error:
        estimate_plan(MODEL, cluster, NVFP4, PLAN, h100)
    message = str(error.value)
    assert f"[{NVFP4_DEVICE_RULE}]" in message
    assert "h100-sxm-80gb lists peaks for bf16, fp16, fp32, fp8" in message
    assert "--precision fp8 or a Blackwell profile" in message


def test_nvfp4_under_the_torch_runtime_is_refused() -> None:
    cluster = ClusterSpec(hardware="b200", num_gpus=8)
    with pytest.raises(SpecError) as error:
        estimate_plan(MODEL, cluster, NVFP4, PLAN, B200, options=runtime_options("torch"))
    assert f"[{TORCH_NVFP4_RULE}]" in str(error.value)
    assert "--runtime megatron" in str(error.value)
