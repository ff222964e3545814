"""The calibration of the fidelity benchmark (bench/fidelity_calibration.py, loaded by path:
bench/ is not a package): the host probe and elasticity of the calibration runs, the rows
at one host speed, the profile fit per world size and its re-predicted rows."""

from __future__ import annotations

import dataclasses
import io
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from profiles.store import load_profile
from reports.fidelity_tables import pick_line
from specs.errors import SpecError
from tests.bench.fidelity_rows import row
from tests.costmodel.cpu_fixture import cpu_profile


def test_the_calibrated_speed_is_the_mean_probe_of_every_calibration_run(
    bench: SimpleNamespace,
) -> None:
    first, second, *others = (c.name for c in bench.calibration_cases(2))
    one_rank = [c.name for c in bench.calibration_cases(1)]
    assert one_rank and not set(one_rank) & {first, second, *others}
    runs = {
        first: [bench.Run(0.3, 0.01, 8e-3), bench.Run(0.1, 0.01, 1e-3)],
        second: [bench.Run(0.3, 0.01, 4e-3)],
        **{name: [bench.Run(0.3, 0.01, 2e-3)] for name in others},
        **{name: [bench.Run(0.3, 0.01, 0.5e-3)] for name in one_rank},
    }
    # what `paraplan calibrate --host-speed` brings every fitted run to: 8, 1, 4, 2 ms
    expected = (8e-3 * 1e-3 * 4e-3 * 2e-3 ** len(others)) ** (1 / (3 + len(others)))
    assert bench.calibration_probe_s(runs) == pytest.approx(expected)
    assert bench.calibration_probe_s(runs, 1) == pytest.approx(0.5e-3)  # its own runs only
    assert bench.calibration_probe_s(runs, 4) is None  # no calibration runs of 4 ranks
    runs[second].append(bench.Run(0.25, 0.01, None))
    assert bench.calibration_probe_s(runs) is None


def _probing(bench: SimpleNamespace, mean_s: float):
    """The stored A100 profile's figures as a CPU profile (only CPU profiles carry host
    timings) with a host probe of ``mean_s`` measured."""
    from profiles.schema_host import HostOverheads, HostTiming

    stored = Path(__file__).resolve().parents[2] / "profiles" / "data" / "a100-sxm-80gb.json"
    base = bench.load_profile(str(stored))
    probe = HostTiming(name="host_probe", num_samples=9, mean_s=mean_s, min_s=mean_s, max_s=mean_s)
    return dataclasses.replace(
        base,
        device=dataclasses.replace(base.device, kind="cpu"),
        host=HostOverheads(timings=(probe,)),
    )


def test_host_speed_rows_take_the_run_at_one_host_speed(bench: SimpleNamespace) -> None:
    cal = [c.name for c in bench.CALIBRATION_CASES]
    measured = {
        # calibration runs: time follows the probe to the power 0.5 exactly
        **{
            name: [bench.Run(0.1 * f**0.5, 0.01, 1e-3 * f) for f in (0.25, 1.0, 4.0)]
            for name in cal
        },
        # the plan's runs: a fast spell, a slow one, and one at the reference speed
        "p": [
            bench.Run(0.1, 0.01, 0.25e-3),
            bench.Run(0.6, 0.01, 4e-3),
            bench.Run(0.21, 0.01, 1e-3),
        ],
    }
    elasticity, why = bench.calibration_elasticity(measured)
    assert (elasticity, why) == (pytest.approx(0.5), "")
    profiles = {2: ("two", _probing(bench, 0.8e-3))}
    cal_row = dataclasses.replace(row("p", 0.1, 0.2), host_probe_s=0.25e-3)  # raw middle run
    speed = bench.host_speed_section(profiles, [cal_row], measured, elasticity, None, "")
    # at one host speed: 0.2, 0.3 and 0.21 s; the middle is the run at the reference probe
    only = speed["rows"][0]
    assert only["measured_iteration_time_s"] == 0.21
    assert only["host_probe_s"] == 1e-3
    assert only["predicted_iteration_time_s"] == pytest.approx(0.2)  # reference speed: as is
    assert speed["elasticity"] == pytest.approx(0.5)
    assert speed["reference_probe_s"] == {"2": pytest.approx(1e-3)}
    measured[cal[0]] = [bench.Run(0.1, 0.01, None)]
    assert bench.calibration_elasticity(measured) == (
        None,
        "a calibration run without a host probe",
    )


def test_the_host_speed_pick_compares_the_plans_at_one_host_speed(
    bench: SimpleNamespace,
) -> None:
    # every calibration run at the reference probe 1 ms: elasticity 1 from spread-out pairs
    cal = [c.name for c in bench.CALIBRATION_CASES]
    measured = {name: [bench.Run(0.1 * f, 0.01, 1e-3 * f) for f in (0.5, 1.0, 2.0)] for name in cal}
    # the pick ran in a slow spell (probe 1.5 ms), the other plan in a fast one (0.5 ms)
    measured["pick"] = [bench.Run(0.12, 0.01, 1.5e-3)] * 3
    measured["other"] = [bench.Run(0.06, 0.01, 0.5e-3)] * 3
    rows = [
        dataclasses.replace(row("pick", 0.12, 0.08), host_probe_s=1.5e-3),
        dataclasses.replace(row("other", 0.06, 0.12), host_probe_s=0.5e-3),
    ]
    profiles = {2: ("two", _probing(bench, 1e-3))}
    speed = bench.host_speed_section(profiles, rows, measured, 1.0, "pick", "")
    # as measured the pick took 2x the other plan; at one host speed 0.08 s against 0.12 s
    assert speed["pick_within_5pct"] is True
    assert speed["pick"]["best_measured"] == "pick"
    assert speed["pick"]["measured_s"] == pytest.approx(0.08)
    assert speed["pick"]["measured_at"] == "reference host speed"
    assert [r["measured_iteration_time_s"] for r in speed["rows"]] == [0.12, 0.06]  # as run
    assert pick_line(speed).endswith("pick (80.0 ms), both at the reference host speed")


def test_probe_references_follow_the_profiles_probes(bench: SimpleNamespace) -> None:
    profiles = {2: ("two", _probing(bench, 0.8e-3)), 1: ("one", _probing(bench, 0.4e-3))}
    refs = bench.probe_references(profiles, 1.2e-3)
    assert refs == pytest.approx({2: 1.2e-3, 1: 0.6e-3})
    assert bench.probe_references(profiles, None) is None
    stored = Path(__file__).resolve().parents[2] / "profiles" / "data" / "a100-sxm-80gb.json"
    unprobed = bench.load_profile(str(stored))
    assert bench.probe_references({2: ("two", unprobed)}, 1.2e-3) is None  # no probe measured
    # a world size with calibration runs of its own takes their probe
    own = bench.probe_references(profiles, 1.2e-3, {1: 0.5e-3})
    assert own == pytest.approx({2: 1.2e-3, 1: 0.5e-3})
    assert bench.probe_references(profiles, 1.2e-3, {1: None}) == refs


def test_other_world_sizes_take_the_calibrated_split_and_time_scale(
    bench: SimpleNamespace,
) -> None:
    stored = Path(__file__).resolve().parents[2] / "tests" / "reports" / "data"
    base = bench.load_profile(str(stored / "cpu-quick-tiny.json"))
    calibrated = bench.with_layer_collective_scale(
        bench.time_scaled(bench.with_backward_scale(base, 0.9), 1.3), 0.6
    )
    profiles = {2: ("two", base), 1: ("one", base)}
    out = bench.calibrated_profiles(profiles, {2: ("cal.json", calibrated)})
    assert out[2] == ("cal.json", calibrated)
    one = out[1][1]
    assert out[1][0] == "one"
    assert one.host.backward_scale == 0.9
    assert one.host.layer_collective_scale == 0.6
    assert one.compute.op_overhead_s == pytest.approx(1.3 * base.compute.op_overhead_s)
    assert bench.fitted_time_scale(profiles, one, 1) == pytest.approx(1.3)
    # a world size calibrated on its own runs keeps its own fit
    own = bench.time_scaled(base, 0.8)
    out = bench.calibrated_profiles(profiles, {2: ("cal.json", calibrated), 1: ("w1.json", own)})
    assert out[1] == ("w1.json", own)
    assert bench.fitted_time_scale(profiles, own, 1) == pytest.approx(0.8)


def test_calibration_needs_every_calibration_case_measured(
    bench: SimpleNamespace, tmp_path: Path
) -> None:
    stored = Path(__file__).resolve().parents[2] / "profiles" / "data" / "a100-sxm-80gb.json"
    settings = bench.Settings(work=tmp_path, steps=3, warmup=1, precision="fp32")
    console = bench.Console(file=io.StringIO())
    first = bench.CALIBRATION_CASES[0].name
    with pytest.raises(SpecError, match="calibration runs failed"):
        bench.calibrate_profile(
            stored, {first: [bench.Run(seconds=0.1, gib=0.01, probe_s=None)]}, settings, console
        )


def test_calibration_fits_every_run_at_one_host_speed_or_the_middle_ones(
    bench: SimpleNamespace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stored = Path(__file__).resolve().parents[2] / "profiles" / "data" / "a100-sxm-80gb.json"
    module = sys.modules["fidelity_calibration"]
    calls: list[list[str]] = []
    monkeypatch.setattr(module, "predict", lambda bundle, profile, out: None)
    monkeypatch.setattr(module, "run_command", lambda command, argv: calls.append(argv) or 0)
    settings = bench.Settings(work=tmp_path, steps=3, warmup=1, precision="fp32")
    runs = {
        c.name: [bench.Run(0.3, 0.01, 2e-3), bench.Run(0.1, 0.01, 1e-3), bench.Run(0.2, 0.01, 1e-3)]
        for c in bench.CALIBRATION_CASES
    }
    console = bench.Console(file=io.StringIO())
    bench.calibrate_profile(stored, runs, settings, console, elasticity=0.75)
    bench.calibrate_profile(stored, runs, settings, console)
    bench.calibrate_profile(stored, runs, settings, console, world=1)
    with_speed, middle, one_rank = calls
    n = len(bench.calibration_cases(2))
    assert with_speed[with_speed.index("-o") + 1] == str(tmp_path / "profile-calibrated.json")
    assert one_rank[one_rank.index("-o") + 1] == str(tmp_path / "profile-calibrated-w1.json")
    ones = [a for a in one_rank if "/runs/" in a]
    assert [Path(a).name for a in ones] == [f"{c.name}.r2" for c in bench.calibration_cases(1)]
    assert with_speed[-2:] == ["--host-speed", "0.75"]
    assert len([a for a in with_speed if "/runs/" in a]) == 3 * n  # every run of each case
    assert "--host-speed" not in middle
    folders = [a for a in middle if "/runs/" in a]
    assert len(folders) == n and all(a.endswith(".r2") for a in folders)  # 0.2 s: the middle


def test_each_world_size_with_calibration_runs_gets_its_own_fit(
    bench: SimpleNamespace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`calibrated_section` fits the 1-rank profile on its own calibration runs (here a
    stand-in fit: the 2-rank profile x1.25, the 1-rank one x0.8) and predicts the 1-rank
    plan with it, the 2-rank plans with the 2-rank fit; the JSON carries both scales."""
    module = sys.modules["fidelity_calibration"]
    base = cpu_profile()
    hw = {world: tmp_path / f"profile-{world}.json" for world in (1, 2)}
    for path in hw.values():
        bench.save_profile(base, path)
    scales = {2: 1.25, 1: 0.8}

    def fake_fit(profile_path, runs, settings, log, elasticity=None, world=2):
        out = settings.work / module._calibrated_name(world)
        fitted = bench.time_scaled(load_profile(str(profile_path)), scales[world])
        bench.save_profile(bench.with_layer_collective_scale(fitted, 0.7), out)
        return out

    monkeypatch.setattr(module, "calibrate_profile", fake_fit)
    monkeypatch.setattr(module, "planner_choice", lambda *a: (None, "not searched here"))
    profiles = {world: (str(path), base) for world, path in hw.items()}
    cases = [c for c in bench.timing_suite() if c.name in ("w1-mbs2", "dp2")]
    settings = bench.Settings(work=tmp_path, steps=3, warmup=1, precision="fp32")
    rows = bench.repredicted([row(c.name, 0.1, 0.1) for c in cases], cases, profiles, settings)
    measured = {c.name: [bench.Run(0.1, 0.01, None)] for c in bench.CALIBRATION_CASES}
    out = bench.calibrated_section(
        profiles, cases, rows, settings, bench.Console(file=io.StringIO()), None, measured
    )
    assert out["time_scale"] == pytest.approx(1.25)
    assert out["layer_collective_scale"] == pytest.approx(0.7)
    assert out["by_world"]["1"]["time_scale"] == pytest.approx(0.8)
    assert out["by_world"]["1"]["profile"].endswith("profile-calibrated-w1.json")
    before = {r.name: r.predicted_time_s for r in rows}
    after = {r["name"]: r["predicted_iteration_time_s"] for r in out["rows"]}
    assert after["w1-mbs2"] < before["w1-mbs2"]  # its own fit, faster
    assert after["dp2"] > before["dp2"]  # the 2-rank fit, slower
    assert "host_speed" not in out  # no probes in these runs
