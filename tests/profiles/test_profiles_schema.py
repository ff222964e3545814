"""Stored profiles load, round-trip and match their derivation; the schema rejects bad input
and also holds a profile measured on a CPU machine with gloo."""

from __future__ import annotations

import dataclasses
import json

import pytest

from profiles import derive, derive_rules
from profiles.schema import HardwareProfile
from profiles.schema_device import ComputeProfile, DeviceSpec, EfficiencyPoint
from profiles.schema_network import CollectiveFit, CommunicationProfile, Topology
from profiles.schema_provenance import MeasurementSpread, Provenance
from profiles.store import load_profile, save_profile, stored_profile_names
from specs import serde
from specs.errors import SpecError

STORED = [
    "a100-sxm-40gb",
    "a100-sxm-80gb",
    "a800-sxm-80gb",
    "b200",
    "b300",
    "gb200-nvl72",
    "gb300-nvl72",
    "h100-sxm-80gb",
    "h200-sxm-141gb",
    "h800-sxm-80gb",
    "mi300x",
]

# Dense peak TFLOP/s, hardware.yaml / hardware.md §1a.
SOURCED_PEAKS = {
    "a100-sxm-40gb": {"bf16": 312, "fp16": 312, "fp32": 19.5},  # [S1][S2]
    "a100-sxm-80gb": {"bf16": 312, "fp16": 312, "fp32": 19.5},  # [S1][S2]
    "h100-sxm-80gb": {"bf16": 989.4, "fp16": 989.4, "fp8": 1978.9, "fp32": 66.9},  # [S4][S5]
    "h200-sxm-141gb": {"bf16": 989, "fp16": 989, "fp8": 1979, "fp32": 67},  # [S1][S7]
    # H800: the H100 SXM's peaks (same die [S65]); vidur's H800 SKU: fp16 989, fp8 1979 [S50]
    "h800-sxm-80gb": {"bf16": 989.4, "fp16": 989.4, "fp8": 1978.9, "fp32": 66.9},
    "a800-sxm-80gb": {"bf16": 312, "fp16": 312, "fp32": 19.5},  # A100's [S1][S2][S67]
    "b200": {"bf16": 2250, "fp16": 2250, "fp8": 4500, "fp4": 9000, "fp32": 80},  # [S1][S8]
    "mi300x": {"bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9, "fp32": 163.4},  # [S1]
    "gb200-nvl72": {"bf16": 2500, "fp16": 2500, "fp8": 5000, "fp4": 10000, "fp32": 80},  # [S1][S8]
    "gb300-nvl72": {"bf16": 2500, "fp16": 2500, "fp8": 5000, "fp4": 15000, "fp32": 80},  # [S1][S9]
    "b300": {"bf16": 2250, "fp16": 2250, "fp8": 4500, "fp4": 13500, "fp32": 80},  # [S1][S9]
}
# (memory GiB, HBM GB/s, scale-up GB/s per direction, NIC GB/s per GPU), hardware.yaml;
# memory is NVML's total in MiB / 1024 where [S60] lists it, else the vendor's GB as GiB.
SOURCED_DEVICE = {
    "a100-sxm-40gb": (40_960 / 1024, 1555, 300, 25.0),  # [S60][S2][S3][S6][S21]
    "a100-sxm-80gb": (81_920 / 1024, 2039, 300, 25.0),  # [S60][S2][S6][S21]: 200 Gb/s NIC
    "h100-sxm-80gb": (81_559 / 1024, 3350, 450, 50.0),  # [S60][S4][S6][S16]: 400 Gb/s NIC
    "h200-sxm-141gb": (143_771 / 1024, 4800, 450, 50.0),  # [S60][S1][S7][S6][S16]
    # H800: H100's NVML total and HBM [S60][S65]; NVLink 400 GB/s bidirectional [S65];
    # one 400 Gb/s IB NIC per GPU (IB 50 GB/s) [S66]
    "h800-sxm-80gb": (81_559 / 1024, 3350, 200, 50.0),
    "a800-sxm-80gb": (81_920 / 1024, 2039, 200, 25.0),  # A100 80GB's; NVLink 400 [S67]
    "b200": (180, 8000, 900, 50.0),  # [S1][S17][S6][S16]
    "mi300x": (192, 5300, 448, 50.0),  # [S1][S14][S6]
    "gb200-nvl72": (186, 8000, 900, 50.0),  # [S1][S18]: 4x CX-7 400G per 4-GPU tray
    "gb300-nvl72": (279, 8000, 900, 100.0),  # [S9][S19][S6]: 4x CX-8 800G per tray
    "b300": (288, 8000, 900, 100.0),  # [S1][S6]: DGX B300 8x CX-8 800G
}
# (gpus per node, scale-up domain): hardware.yaml nvswitch_domain; NVL72 trays of 4 [S18].
NODE_AND_DOMAIN = {"gb200-nvl72": (4, 72), "gb300-nvl72": (4, 72)}


def test_stored_names_are_the_listed_profiles() -> None:
    assert stored_profile_names() == STORED


@pytest.mark.parametrize("name", STORED)
def test_stored_profile_loads_and_round_trips(name: str, tmp_path) -> None:
    profile = load_profile(name)
    assert profile.name == name
    assert serde.from_dict(HardwareProfile, serde.to_dict(profile)) == profile
    path = save_profile(profile, tmp_path / "sub" / f"{name}.json")
    assert load_profile(str(path)) == profile


@pytest.mark.parametrize("name", STORED)
def test_stored_json_equals_derivation(name: str) -> None:
    text = (derive.DATA_DIR / f"{name}.json").read_text()
    assert text == serde.dumps(derive.derived_profiles()[name])


def test_derive_check_mode_reports_no_drift(tmp_path, capsys) -> None:
    assert derive.main([]) == 0
    assert derive.main(["--out", str(tmp_path)]) == 1  # empty folder: every file missing
    assert derive.main(["--write", "--out", str(tmp_path)]) == 0
    assert sorted(p.stem for p in tmp_path.iterdir()) == STORED
    assert derive.main(["--out", str(tmp_path)]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("name", STORED)
def test_peaks_and_device_figures_equal_sources(name: str) -> None:
    profile = load_profile(name)
    assert profile.device.peak_tflops == pytest.approx(SOURCED_PEAKS[name])
    memory_gib, hbm_GBps, scale_up_GBps, nic_GBps = SOURCED_DEVICE[name]
    assert profile.device.memory_gib == memory_gib
    assert profile.device.hbm_GBps == pytest.approx(hbm_GBps)
    assert profile.topology.scale_up_GBps_per_gpu == scale_up_GBps
    assert profile.topology.nic_GBps_per_gpu == nic_GBps
    node_domain = (profile.topology.gpus_per_node, profile.topology.scale_up_domain)
    assert node_domain == NODE_AND_DOMAIN.get(name, (8, 8))


def test_fp8_absent_only_where_unsupported() -> None:
    ampere = [n for n in STORED if n.startswith(("a100", "a800"))]
    assert all("fp8" not in load_profile(n).device.peak_tflops for n in ampere)
    assert all("fp8" in load_profile(n).device.peak_tflops for n in STORED if n not in ampere)


@pytest.mark.parametrize("name", STORED)
def test_provenance_lists_every_cited_source(name: str) -> None:
    prov = load_profile(name).provenance
    assert prov.method == "derived"
    assert prov.command == "python -m profiles.derive --write"
    listed = {s.split("]")[0] + "]" for s in prov.sources}
    cited = {f"[{k}]" for note in prov.notes for k in derive_rules.SOURCES if f"[{k}]" in note}
    assert cited <= listed, f"notes cite sources not listed: {sorted(cited - listed)}"


# --- load errors -------------------------------------------------------------------------


def test_unknown_name_lists_stored_names_and_accepts_paths() -> None:
    with pytest.raises(SpecError) as info:
        load_profile("h100-sxm")
    message = str(info.value)
    assert all(name in message for name in STORED)
    assert "path" in message
    assert "did you mean 'h100-sxm-80gb'" in message


def test_malformed_json_is_reported_with_position(tmp_path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"schema_version": 1,, }')
    with pytest.raises(SpecError, match=r"malformed JSON at line 1 column"):
        load_profile(str(path))


def test_missing_file_is_reported(tmp_path) -> None:
    with pytest.raises(SpecError, match="cannot read"):
        load_profile(str(tmp_path / "absent.json"))


def _stored_dict(name: str = "h100-sxm-80gb") -> dict:
    return serde.to_dict(load_profile(name))


def test_unknown_key_is_rejected(tmp_path) -> None:
    data = _stored_dict()
    data["device"]["tdp_w"] = 700
    path = tmp_path / "extra.json"
    path.write_text(json.dumps(data))
    with pytest.raises(SpecError, match="unknown key 'tdp_w'"):
        load_profile(str(path))


@pytest.mark.parametrize("version", [0, 2, None])
def test_wrong_schema_version_is_refused(tmp_path, version) -> None:
    data = _stored_dict()
    data["schema_version"] = version
    data["future_part"] = {}  # a newer file may add keys: the version message must win
    path = tmp_path / "v.json"
    path.write_text(json.dumps(data))
    with pytest.raises(SpecError, match=r"schema_version .* not supported .* version 1"):
        load_profile(str(path))


def test_schema_version_checked_on_direct_construction() -> None:
    profile = load_profile("a100-sxm-80gb")
    with pytest.raises(SpecError, match="schema_version 2"):
        dataclasses.replace(profile, schema_version=2)


# --- schema rules ------------------------------------------------------------------------


def test_gemm_curve_must_be_monotone() -> None:
    points = (
        EfficiencyPoint(gflop=1.0, efficiency=0.6),
        EfficiencyPoint(gflop=10.0, efficiency=0.5),
    )
    with pytest.raises(SpecError, match="non-decreasing"):
        _cpu_compute(points)


def test_unknown_dtype_is_rejected() -> None:
    with pytest.raises(SpecError, match="unknown dtype 'int8'"):
        DeviceSpec(name="x", vendor="y", peak_tflops={"int8": 1.0}, memory_gib=1, hbm_GBps=1)


def test_efficiency_outside_unit_interval_is_rejected() -> None:
    with pytest.raises(SpecError, match=r"in \(0, 1\]"):
        EfficiencyPoint(gflop=1.0, efficiency=1.2)


def test_send_recv_is_between_two_ranks() -> None:
    with pytest.raises(SpecError, match="group_size must be 2"):
        CollectiveFit(op="send_recv", group_size=4, placement="intra", latency_s=0, busbw_GBps=1)


def test_duplicate_fits_are_rejected() -> None:
    fit = CollectiveFit(op="all_reduce", group_size=2, placement="intra", latency_s=0, busbw_GBps=1)
    with pytest.raises(SpecError, match="duplicate fits"):
        CommunicationProfile(backend="gloo", fits=(fit, fit))


def test_intra_fit_larger_than_domain_is_rejected() -> None:
    fit = CollectiveFit(op="all_reduce", group_size=8, placement="intra", latency_s=0, busbw_GBps=1)
    with pytest.raises(SpecError, match="scale_up_domain 4"):
        _cpu_profile(communication=CommunicationProfile(backend="gloo", fits=(fit,)))


def test_curve_without_peak_is_rejected() -> None:
    compute = ComputeProfile(
        gemm_efficiency={"bf16": (EfficiencyPoint(gflop=1.0, efficiency=1.0),)},
        gemm_alignment_elements=1,
        gemm_misaligned_factor=1.0,
        memory_bandwidth_efficiency=1.0,
    )
    with pytest.raises(SpecError, match="no bf16 entry"):
        _cpu_profile(compute=compute)


def test_derived_profile_needs_sources() -> None:
    with pytest.raises(SpecError, match="must list its sources"):
        Provenance(method="derived", date="2026-01-01", command="x")


# --- a measured CPU profile fits the same schema ------------------------------------------


def _cpu_compute(points: tuple[EfficiencyPoint, ...]) -> ComputeProfile:
    return ComputeProfile(
        gemm_efficiency={"fp32": points},
        gemm_alignment_elements=16,
        gemm_misaligned_factor=0.9,
        memory_bandwidth_efficiency=1.0,
    )


def _cpu_profile(**overrides) -> HardwareProfile:
    """What `paraplan profile` writes on a 4-process gloo machine (peak = best GEMM)."""
    fits = tuple(
        CollectiveFit(
            op="all_reduce", group_size=n, placement="intra", latency_s=5e-5, busbw_GBps=3.0
        )
        for n in (2, 4)
    )
    parts = {
        "name": "this-machine",
        "device": DeviceSpec(
            name="AMD EPYC (2 cores)",
            vendor="AMD",
            kind="cpu",
            peak_tflops={"fp32": 0.21},
            memory_gib=15.6,
            hbm_GBps=11.5,
        ),
        "compute": _cpu_compute(
            (
                EfficiencyPoint(gflop=0.01, efficiency=0.35),
                EfficiencyPoint(gflop=2.0, efficiency=1.0),
            )
        ),
        "communication": CommunicationProfile(backend="gloo", fits=fits),
        "topology": Topology(
            gpus_per_node=4, scale_up_domain=4, scale_up_fabric="host_memory", nics_per_node=0
        ),
        "provenance": Provenance(
            method="measured",
            date="2026-11-29",
            command="paraplan profile --quick --nproc 4 --out this-machine.json",
            tool_version="0.1.0",
            torch_version="2.13.0+cpu",
            collective_library_version="gloo",
            host="ci-runner",
            spread=(
                MeasurementSpread(
                    quantity="gemm.fp32.1024x1024x1024",
                    unit="s",
                    num_samples=20,
                    mean=0.011,
                    stdev=0.0004,
                    min=0.0105,
                    max=0.0121,
                ),
            ),
        ),
    }
    parts.update(overrides)
    return HardwareProfile(**parts)


def test_measured_cpu_profile_round_trips(tmp_path) -> None:
    profile = _cpu_profile()
    path = save_profile(profile, tmp_path / "cpu.json")
    loaded = load_profile(str(path))
    assert loaded == profile
    assert loaded.topology.nic_GBps_per_gpu is None
    assert loaded.provenance.spread[0].num_samples == 20


def test_spread_statistics_must_be_consistent() -> None:
    with pytest.raises(SpecError, match="min <= mean <= max"):
        MeasurementSpread(
            quantity="q", unit="s", num_samples=3, mean=5.0, stdev=0.1, min=1.0, max=2.0
        )
    with pytest.raises(SpecError, match="min <= median <= max"):
        MeasurementSpread(
            quantity="q", unit="s", num_samples=3, mean=1.5, stdev=0.1, min=1.0, max=2.0,
            median=2.5,
        )  # fmt: skip


def test_a_spread_without_a_median_reads_as_none(tmp_path) -> None:
    with_median = _cpu_profile()
    spread = dataclasses.replace(with_median.provenance.spread[0], median=0.0108)
    profile = dataclasses.replace(
        with_median, provenance=dataclasses.replace(with_median.provenance, spread=(spread,))
    )
    path = save_profile(profile, tmp_path / "cpu.json")
    assert load_profile(str(path)).provenance.spread[0].median == 0.0108
    # a profile written before the median was recorded
    text = path.read_text().replace('"median": 0.0108', '"median": null')
    older = json.loads(text)
    del older["provenance"]["spread"][0]["median"]
    path.write_text(json.dumps(older))
    assert load_profile(str(path)).provenance.spread[0].median is None
