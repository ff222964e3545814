"""The fitted GEMM rate factors (costmodel.fitted_rates): the shared lookup, the
sustained 16-bit factor and its option."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.estimate import estimate_plan
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import (
    CUDA11_GEMM_RATE_FACTOR,
    DEFAULT_OPTIONS,
    MEGATRON_2021,
    TORCH_OPTIONS,
    framework_profile,
)
from costmodel.fitted_rates import (
    SUSTAINED_DTYPES,
    SUSTAINED_GEMM_RATE_FACTORS,
    SUSTAINED_GEMM_RATE_SHARED,
    generation_rate_factor,
    sustained_gemm_rate_factor,
)
from profiles.schema_device import GENERATIONS
from profiles.store import load_profile, stored_profile_names
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from tests.costmodel.cpu_fixture import cpu_profile

H100 = load_profile("h100-sxm-80gb")
A100 = load_profile("a100-sxm-80gb")


def _efficiencies(profile, dtype):
    return [p.efficiency for p in profile.compute.gemm_efficiency[dtype]]


def test_table_is_keyed_by_profile_generations_and_holds_fractions():
    assert set(SUSTAINED_GEMM_RATE_FACTORS) <= set(GENERATIONS)
    assert all(0.0 < f <= 1.0 for f in SUSTAINED_GEMM_RATE_FACTORS.values())
    assert 0.0 < SUSTAINED_GEMM_RATE_SHARED <= 1.0
    assert set(SUSTAINED_DTYPES) == {"bf16", "fp16"}


def test_every_stored_gpu_profile_takes_its_generation_or_the_shared_value():
    for name in stored_profile_names():
        profile = load_profile(name)
        generation = profile.device.generation
        assert generation in GENERATIONS, name
        own = SUSTAINED_GEMM_RATE_FACTORS.get(generation)
        expected = SUSTAINED_GEMM_RATE_SHARED if own is None else own
        assert sustained_gemm_rate_factor(profile) == expected, name


def test_override_wins_and_cpu_profiles_are_not_scaled():
    assert sustained_gemm_rate_factor(H100, 0.7) == 0.7
    cpu = cpu_profile()
    assert cpu.device.kind == "cpu"
    assert sustained_gemm_rate_factor(cpu) == 1.0
    assert sustained_gemm_rate_factor(cpu, 0.8) == 0.8


@pytest.mark.parametrize("bad", [0.0, -0.5, 1.2])
def test_option_outside_the_unit_interval_is_rejected(bad):
    with pytest.raises(SpecError, match="sustained_gemm_rate_factor"):
        ExecutionOptions(sustained_gemm_rate_factor=bad)


def test_option_scales_the_16bit_curves_only():
    options = ExecutionOptions(sustained_gemm_rate_factor=0.8, fp8_gemm_rate_factor=1.0)
    scaled = framework_profile(H100, options)
    for dtype in ("bf16", "fp16"):
        assert _efficiencies(scaled, dtype) == pytest.approx(
            [0.8 * e for e in _efficiencies(H100, dtype)]
        )
    for dtype in ("fp8", "fp32"):
        assert _efficiencies(scaled, dtype) == _efficiencies(H100, dtype)
    assert scaled.compute.attention == H100.compute.attention
    assert scaled.device == H100.device


def test_composes_with_the_2021_cublas_factor_by_multiplication():
    options = dataclasses.replace(MEGATRON_2021, sustained_gemm_rate_factor=0.9)
    scaled = framework_profile(A100, options)
    assert _efficiencies(scaled, "fp16") == pytest.approx(
        [0.9 * CUDA11_GEMM_RATE_FACTOR * e for e in _efficiencies(A100, "fp16")]
    )


def test_torch_runtime_keeps_the_profile():
    torch_options = dataclasses.replace(TORCH_OPTIONS, sustained_gemm_rate_factor=0.5)
    assert framework_profile(H100, torch_options) is H100
    assert framework_profile(H100, TORCH_OPTIONS) is H100


def test_a_bf16_step_moves_with_the_factor_and_an_fp8_step_does_not():
    model = get_preset("llama3-8b")
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=8)
    plan = ParallelPlan.for_world(8, tp=2, sequence_parallel=True)

    def step_s(precision, factor):
        job = TrainingJob(seq_length=4096, global_batch_size=32, precision=precision)
        options = dataclasses.replace(DEFAULT_OPTIONS, sustained_gemm_rate_factor=factor)
        return estimate_plan(model, cluster, job, plan, H100, options=options).iteration_time_s

    assert step_s("bf16", 0.7) > step_s("bf16", 1.0)
    assert step_s("fp8", 0.7) == step_s("fp8", 1.0)


def test_the_2021_option_set_keeps_its_sourced_cublas_factor_alone():
    assert MEGATRON_2021.sustained_gemm_rate_factor == 1.0
    scaled = framework_profile(A100, MEGATRON_2021)
    assert _efficiencies(scaled, "fp16") == pytest.approx(
        [CUDA11_GEMM_RATE_FACTOR * e for e in _efficiencies(A100, "fp16")]
    )


def test_generation_rate_factor_table_shared_override_and_cpu() -> None:
    h100 = H100
    table = {h100.device.generation: 0.9}
    kwargs = {"by_generation": table, "shared": 0.6, "override": None}
    assert generation_rate_factor(h100, bare_on_cpu=True, **kwargs) == 0.9
    other = dataclasses.replace(h100, device=dataclasses.replace(h100.device, generation="cdna3"))
    assert generation_rate_factor(other, bare_on_cpu=False, **kwargs) == 0.6
    cpu = dataclasses.replace(h100, device=dataclasses.replace(h100.device, kind="cpu"))
    assert generation_rate_factor(cpu, bare_on_cpu=True, **kwargs) == 1.0
    assert generation_rate_factor(cpu, bare_on_cpu=False, **kwargs) == 0.9
    kwargs["override"] = 0.5
    assert generation_rate_factor(cpu, bare_on_cpu=True, **kwargs) == 0.5
