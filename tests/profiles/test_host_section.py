"""The typed host section of CPU profiles (`profiles.schema.HostOverheads`) and its
conversion from the ``op_overhead.*`` spreads of older profiles (`profiles.lookup`)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from costmodel.runtimes.torch.host_rates import spread_scale
from profiles.lookup import host_from_spread, host_overheads
from profiles.schema import HostOverheads, HostTiming, MeasurementSpread
from profiles.store import load_profile, save_profile, stored_profile_names
from specs.errors import SpecError
from tests.costmodel.cpu_fixture import cpu_profile

STORED_CPU = Path(__file__).parents[1] / "reports" / "data" / "cpu-quick-tiny.json"


def _timing(name: str, mean_s: float, median_s: float | None = None) -> HostTiming:
    low = min(mean_s, median_s if median_s is not None else mean_s)
    high = max(mean_s, median_s if median_s is not None else mean_s)
    return HostTiming(
        name=name, num_samples=5, mean_s=mean_s, median_s=median_s, min_s=low, max_s=high
    )


def test_conversion_carries_every_op_overhead_spread_and_nothing_else() -> None:
    spread = (
        MeasurementSpread(
            quantity="op_overhead.add", unit="s", num_samples=4, mean=2e-6, stdev=1e-7,
            min=1.8e-6, max=2.3e-6, median=1.9e-6,
        ),
        MeasurementSpread(
            quantity="memory.add.fp32.4096B", unit="s", num_samples=4, mean=3e-6, stdev=0.0,
            min=3e-6, max=3e-6,
        ),
    )  # fmt: skip
    host = host_from_spread(spread)
    assert host == HostOverheads(
        timings=(
            HostTiming(
                name="add", num_samples=4, mean_s=2e-6, median_s=1.9e-6, min_s=1.8e-6,
                max_s=2.3e-6,
            ),
        )
    )  # fmt: skip
    assert host_from_spread(spread[1:]) is None


def test_typed_section_and_spreads_give_the_same_host_inputs() -> None:
    old = cpu_profile()
    assert old.host is None
    typed = dataclasses.replace(old, host=host_from_spread(old.provenance.spread))
    assert typed.host is not None and typed.host.timing("autograd_forward") is not None
    assert spread_scale(typed) == spread_scale(old)
    # The runtime reads the section, not the spreads, once the profile has one.
    faster = HostOverheads(
        timings=tuple(dataclasses.replace(t, mean_s=t.mean_s / 2, min_s=t.min_s / 2)
                      for t in typed.host.timings if t.median_s is None)
    )  # fmt: skip
    means, _ = spread_scale(dataclasses.replace(old, host=faster))
    first = faster.timings[0]
    assert means["op_overhead." + first.name] == pytest.approx(first.mean_s)


def test_section_round_trips_through_json(tmp_path) -> None:
    old = cpu_profile()
    typed = dataclasses.replace(old, host=host_from_spread(old.provenance.spread))
    path = save_profile(typed, tmp_path / "cpu.json")
    assert json.loads(path.read_text())["host"]["timings"][0]["mean_s"] > 0
    assert load_profile(str(path)) == typed


def test_stored_cpu_profile_converts_on_read_and_gpu_profiles_have_no_section() -> None:
    cpu = load_profile(str(STORED_CPU))
    host = host_overheads(cpu)
    assert host is not None and host.timing("add") is not None
    for name in stored_profile_names():
        gpu = load_profile(name)
        assert gpu.host is None and host_overheads(gpu) is None


def test_gpu_profile_refuses_a_section() -> None:
    gpu = load_profile(stored_profile_names()[0])
    with pytest.raises(SpecError, match="only CPU profiles have host overheads"):
        dataclasses.replace(gpu, host=HostOverheads(timings=(_timing("add", 1e-6),)))


def test_timings_are_validated() -> None:
    with pytest.raises(SpecError, match="repeated: add"):
        HostOverheads(timings=(_timing("add", 1e-6), _timing("add", 2e-6)))
    with pytest.raises(SpecError, match="min_s <= mean_s"):
        HostTiming(name="add", num_samples=3, mean_s=1e-6, min_s=2e-6, max_s=3e-6)
    with pytest.raises(SpecError, match="name must not be empty"):
        _timing("", 1e-6)
    # A paired difference may be negative.
    assert _timing("functional_all_reduce", -1e-5, -2e-5).min_s == -2e-5
