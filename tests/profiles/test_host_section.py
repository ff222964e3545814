"""The typed host section of CPU profiles (`profiles.schema_host.HostOverheads`): what the
profiler writes (`profiles.profiler.assemble.host_section`), its validation and JSON round
trip, and the one reader of profiles written before it (`profiles.legacy`)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from profiles.legacy import host_from_spread, upgrade_profile_data
from profiles.profiler.assemble import host_section
from profiles.profiler.compute import ComputeResults
from profiles.profiler.timing import (
    CollectiveTiming,
    MemoryTiming,
    OverheadTiming,
    TranscendentalTiming,
    spread,
)
from profiles.schema_host import (
    HostCollective,
    HostOverheads,
    HostStream,
    HostTiming,
    HostTranscendental,
)
from profiles.schema_provenance import MeasurementSpread
from profiles.store import load_profile, profile_from_data, save_profile, stored_profile_names
from specs.errors import SpecError

STORED_CPU = Path(__file__).parents[1] / "reports" / "data" / "cpu-quick-tiny.json"


def _timing(name: str, mean_s: float, median_s: float | None = None) -> HostTiming:
    low = min(mean_s, median_s if median_s is not None else mean_s)
    high = max(mean_s, median_s if median_s is not None else mean_s)
    return HostTiming(
        name=name, num_samples=5, mean_s=mean_s, median_s=median_s, min_s=low, max_s=high
    )


def _records() -> SimpleNamespace:
    """Profiler records of every kind the host section holds, and some it does not."""
    compute = ComputeResults(
        overhead=[
            OverheadTiming(op="add", times_s=(2e-6, 3e-6, 2.5e-6)),
            OverheadTiming(op="functional_all_reduce", times_s=(-1e-5, 2e-5, 4e-5)),
        ],
        memory=[
            MemoryTiming(op="add", dtype="fp32", bytes_moved=12288, times_s=(4e-6, 5e-6)),
            MemoryTiming(op="adamw", dtype="fp32", bytes_moved=28672, times_s=(9e-5,)),
        ],
    )
    calls = (
        CollectiveTiming(
            op="all_reduce", group_size=2, placement="intra", size_bytes=4096,
            concurrent_groups=1, times_s=(3e-4, 5e-4, 4e-4),
        ),
        CollectiveTiming(
            op="all_reduce", group_size=4, placement="inter", size_bytes=4096,
            concurrent_groups=1, times_s=(9e-4,),
        ),
    )  # fmt: skip
    return SimpleNamespace(compute=compute, collectives=calls)


def test_the_profiler_writes_every_host_row_from_its_records() -> None:
    host = host_section(_records())
    assert [t.name for t in host.timings] == ["add", "functional_all_reduce"]
    add = host.timing("add")
    assert add is not None and add.mean_s == pytest.approx(2.5e-6) and add.num_samples == 3
    assert add.median_s == pytest.approx(2.5e-6) and add.min_s == 2e-6 and add.max_s == 3e-6
    paired = host.timing("functional_all_reduce")
    assert paired is not None and paired.min_s < 0  # a paired difference may be negative
    assert [(s.op, s.bytes_moved) for s in host.streams] == [("add", 12288), ("adamw", 28672)]
    # Only the calls within one host: the executor's layer collectives never leave it.
    assert [(c.op, c.group_size, c.size_bytes) for c in host.collective_calls] == [
        ("all_reduce", 2, 4096)
    ]
    assert host.backward_scale == host.layer_collective_scale == 1.0


def test_the_profiler_and_the_reader_of_old_profiles_agree() -> None:
    records = _records()
    c = records.compute
    spreads = [
        spread(r.quantity, r.times_s) for r in (*c.overhead, *c.memory, *records.collectives)
    ]
    assert host_from_spread(spreads) == host_section(records)


def test_conversion_keeps_every_host_spread_and_nothing_else() -> None:
    def entry(quantity: str, mean: float) -> MeasurementSpread:
        return MeasurementSpread(
            quantity=quantity, unit="s", num_samples=4, mean=mean, stdev=0.0, min=mean, max=mean
        )

    spreads = (
        entry("op_overhead.sync_wait", 2e-4),
        entry("memory.rmsnorm.fp32.8192B", 3e-6),
        entry("reduce_scatter.intra.4.65536B", 7e-4),
        entry("gemm.fp32.linear.64x64x64", 1e-5),
        entry("attention.fp32.forward.b1h2s32d16", 2e-5),
    )
    host = host_from_spread(spreads, backward_scale=0.8)
    assert host.timings == (
        HostTiming(name="sync_wait", num_samples=4, mean_s=2e-4, min_s=2e-4, max_s=2e-4),
    )
    assert host.streams == (
        HostStream(op="rmsnorm", dtype="fp32", bytes_moved=8192, num_samples=4, mean_s=3e-6,
                   min_s=3e-6, max_s=3e-6),
    )  # fmt: skip
    assert host.collective_calls == (
        HostCollective(op="reduce_scatter", group_size=4, size_bytes=65536, num_samples=4,
                       mean_s=7e-4, min_s=7e-4, max_s=7e-4),
    )  # fmt: skip
    assert host.backward_scale == 0.8 and host.layer_collective_scale == 1.0


def _stored_cpu_data() -> dict:
    return json.loads(STORED_CPU.read_text())


def test_a_cpu_profile_of_the_older_layout_reads_as_the_typed_one() -> None:
    current = load_profile(str(STORED_CPU))
    assert current.host is not None and current.host.timing("add") is not None
    old = _stored_cpu_data()
    del old["host"]  # the host figures then live only in the provenance spreads
    old["compute"]["backward_scale"] = 0.9
    old["communication"]["layer_collective_scale"] = 0.7
    read = profile_from_data(old, "old")
    assert read.host == dataclasses.replace(
        current.host, backward_scale=0.9, layer_collective_scale=0.7
    )
    assert read == dataclasses.replace(current, host=read.host)
    # A section of timings alone gains the streams and calls its spreads hold.
    partial = _stored_cpu_data()
    partial["host"] = {"timings": partial["host"]["timings"]}
    assert profile_from_data(partial, "partial") == current
    assert upgrade_profile_data(_stored_cpu_data(), "now") == _stored_cpu_data()


def test_gpu_profiles_carry_no_host_fields_and_drop_old_unit_scales() -> None:
    for name in stored_profile_names():
        gpu = load_profile(name)
        assert gpu.host is None
        path = Path(__file__).parents[2] / "profiles" / "data" / f"{name}.json"
        text = path.read_text()
        assert "backward_scale" not in text and "layer_collective_scale" not in text
    data = json.loads(path.read_text())
    data["compute"]["backward_scale"] = 1.0
    assert profile_from_data(data, "old gpu") == gpu
    data["communication"]["layer_collective_scale"] = 0.5
    with pytest.raises(SpecError, match="GPU profile has no host section"):
        profile_from_data(data, "old gpu")


def test_section_round_trips_through_json(tmp_path) -> None:
    cpu = load_profile(str(STORED_CPU))
    scaled = dataclasses.replace(cpu, host=dataclasses.replace(cpu.host, backward_scale=0.75))
    path = save_profile(scaled, tmp_path / "cpu.json")
    assert json.loads(path.read_text())["host"]["backward_scale"] == 0.75
    assert load_profile(str(path)) == scaled


def test_gpu_profile_refuses_a_section() -> None:
    gpu = load_profile(stored_profile_names()[0])
    with pytest.raises(SpecError, match="only CPU profiles have host overheads"):
        dataclasses.replace(gpu, host=HostOverheads(timings=(_timing("add", 1e-6),)))


def test_rows_are_validated() -> None:
    with pytest.raises(SpecError, match="repeated keys"):
        HostOverheads(timings=(_timing("add", 1e-6), _timing("add", 2e-6)))
    with pytest.raises(SpecError, match="min_s <= mean_s"):
        HostTiming(name="add", num_samples=3, mean_s=1e-6, min_s=2e-6, max_s=3e-6)
    with pytest.raises(SpecError, match="name must not be empty"):
        _timing("", 1e-6)
    with pytest.raises(SpecError, match="must be one of"):
        HostCollective(op="gather", group_size=2, size_bytes=8, num_samples=1, mean_s=1.0,
                       min_s=1.0, max_s=1.0)  # fmt: skip
    with pytest.raises(SpecError, match="unknown dtype"):
        HostStream(op="add", dtype="int8", bytes_moved=8, num_samples=1, mean_s=1.0, min_s=1.0,
                   max_s=1.0)  # fmt: skip
    with pytest.raises(SpecError, match="backward_scale must be > 0"):
        HostOverheads(backward_scale=0.0)


def test_a_spread_gives_each_host_row_its_statistics():
    s = MeasurementSpread(
        quantity="op_overhead.add",
        unit="s",
        num_samples=7,
        mean=2e-6,
        stdev=1e-7,
        min=1.5e-6,
        max=3e-6,
        median=1.9e-6,
    )
    stats = s.host_stats()
    for row in (
        HostTiming(name="add", **stats),
        HostStream(op="add", dtype="fp32", bytes_moved=4096, **stats),
        HostCollective(op="all_reduce", group_size=2, size_bytes=1024, **stats),
    ):
        assert (row.num_samples, row.mean_s, row.median_s, row.min_s, row.max_s) == (
            7,
            2e-6,
            1.9e-6,
            1.5e-6,
            3e-6,
        )
    assert set(stats) == {"num_samples", "mean_s", "median_s", "min_s", "max_s"}


def _kernel(op: str, elements: int, mean_s: float) -> HostTranscendental:
    return HostTranscendental(
        op=op, elements=elements, num_samples=3, mean_s=mean_s, min_s=mean_s, max_s=mean_s
    )


def test_transcendental_rows_are_written_validated_and_round_trip(tmp_path) -> None:
    records = _records()
    records.compute.transcendental = [
        TranscendentalTiming(op="silu", elements=32768, times_s=(3e-5, 4e-5, 3.5e-5))
    ]
    (row,) = host_section(records).transcendental
    assert (row.op, row.elements, row.num_samples) == ("silu", 32768, 3)
    assert row.mean_s == pytest.approx(3.5e-5)
    cpu = load_profile(str(STORED_CPU))
    assert cpu.host.transcendental == ()  # measured before the probe: per-byte pricing
    probed = dataclasses.replace(
        cpu, host=dataclasses.replace(cpu.host, transcendental=(row, _kernel("silu", 2**17, 1e-4)))
    )
    assert load_profile(str(save_profile(probed, tmp_path / "cpu.json"))) == probed
    with pytest.raises(SpecError, match="not a probed kernel"):
        _kernel("exp", 1024, 1e-6)
    with pytest.raises(SpecError, match="repeated keys"):
        HostOverheads(transcendental=(_kernel("silu", 1024, 1e-6), _kernel("silu", 1024, 2e-6)))


def test_no_stored_gpu_profile_carries_transcendental_rows() -> None:
    for name in stored_profile_names():
        profile = load_profile(name)
        assert profile.device.kind != "gpu" or profile.host is None
