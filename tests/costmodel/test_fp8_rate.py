"""The FP8 GEMM rate factor by GPU generation (costmodel.fitted_rates) and its override."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import TORCH_OPTIONS, framework_profile
from costmodel.fitted_rates import (
    FP8_GEMM_RATE_FACTOR,
    FP8_GEMM_RATE_FACTORS,
    fp8_gemm_rate_factor,
)
from profiles.schema_device import GENERATIONS
from profiles.store import load_profile, stored_profile_names
from specs.errors import SpecError

B300 = load_profile("b300")
GB200 = load_profile("gb200-nvl72")


def _fp8(profile):
    return [p.efficiency for p in profile.compute.gemm_efficiency["fp8"]]


def _with_generation(profile, generation: str):
    device = dataclasses.replace(profile.device, generation=generation)
    return dataclasses.replace(profile, device=device)


def test_table_keys_are_generations_and_values_in_unit_interval() -> None:
    assert set(FP8_GEMM_RATE_FACTORS) <= set(GENERATIONS)
    for value in (*FP8_GEMM_RATE_FACTORS.values(), FP8_GEMM_RATE_FACTOR):
        assert 0.0 < value <= 1.0


def test_blackwell_ultra_profiles_are_their_own_generation() -> None:
    assert "blackwell_ultra" in FP8_GEMM_RATE_FACTORS
    assert load_profile("b300").device.generation == "blackwell_ultra"
    assert load_profile("gb300-nvl72").device.generation == "blackwell_ultra"
    assert load_profile("b200").device.generation == "blackwell"
    assert GB200.device.generation == "blackwell"


def test_each_stored_gpu_profile_takes_its_generation_value() -> None:
    for name in stored_profile_names():
        profile = load_profile(name)
        want = FP8_GEMM_RATE_FACTORS.get(profile.device.generation, FP8_GEMM_RATE_FACTOR)
        assert fp8_gemm_rate_factor(profile) == want


def test_a_blackwell_ultra_profile_gets_its_own_factor(monkeypatch) -> None:
    table = FP8_GEMM_RATE_FACTORS | {"blackwell": 0.6, "blackwell_ultra": 0.8}
    monkeypatch.setattr("costmodel.fitted_rates.FP8_GEMM_RATE_FACTORS", table)
    assert fp8_gemm_rate_factor(B300) == 0.8
    assert fp8_gemm_rate_factor(GB200) == 0.6
    scaled = framework_profile(B300, ExecutionOptions(sustained_gemm_rate_factor=1.0))
    assert _fp8(scaled) == pytest.approx([0.8 * e for e in _fp8(B300)])


def test_a_generation_without_its_own_entry_takes_the_shared_value(monkeypatch) -> None:
    monkeypatch.setattr("costmodel.fitted_rates.FP8_GEMM_RATE_FACTOR", 0.55)
    assert fp8_gemm_rate_factor(_with_generation(B300, "cdna3")) == 0.55
    assert fp8_gemm_rate_factor(_with_generation(B300, "")) == 0.55


def test_override_replaces_the_generation_value_and_is_validated() -> None:
    options = ExecutionOptions(fp8_gemm_rate_factor=0.5, sustained_gemm_rate_factor=1.0)
    assert fp8_gemm_rate_factor(B300, options.fp8_gemm_rate_factor) == 0.5
    scaled = framework_profile(B300, options)
    assert _fp8(scaled) == pytest.approx([0.5 * e for e in _fp8(B300)])
    assert scaled.compute.gemm_efficiency["bf16"] == B300.compute.gemm_efficiency["bf16"]
    for bad in (0.0, 1.5, -0.1):
        with pytest.raises(SpecError, match="fp8_gemm_rate_factor"):
            ExecutionOptions(fp8_gemm_rate_factor=bad)


def test_torch_runtime_keeps_the_bare_fp8_rate() -> None:
    assert framework_profile(B300, TORCH_OPTIONS) is B300
