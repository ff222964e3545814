"""Runs of the fidelity benchmark during which the hypervisor took the machine's CPU: read
from the run's metrics, set aside and run again (`bench/fidelity_rounds.measure_rounds`),
and named under the result's tables (`reports.fidelity_tables`)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from reports.fidelity_tables import machine_text, set_aside_text
from tests.costmodel.cpu_fixture import cpu_profile


def test_a_run_is_disturbed_above_the_steal_limit(bench: SimpleNamespace) -> None:
    limit = bench.STEAL_LIMIT
    assert not bench.Run(0.1, 0.01, 1e-3).disturbed  # a kernel without steal figures
    assert not bench.Run(0.1, 0.01, 1e-3, steal=limit).disturbed
    assert bench.Run(0.1, 0.01, 1e-3, steal=limit * 1.01).disturbed


def test_measure_reads_the_runs_steal_from_its_metrics(
    bench: SimpleNamespace, suite: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    metrics = {"iteration_time_p50_s": 0.2, "peak_memory_gib": [0.01, 0.03]}

    def fake_execute(config: object) -> None:
        (tmp_path / "metrics.json").write_text(json.dumps(metrics))

    monkeypatch.setattr(suite, "execute", fake_execute)
    case = bench.timing_suite()[1]
    settings = bench.Settings(work=tmp_path, steps=3, warmup=1, precision="fp32")
    bundle = bench.bundle_of(case, "cpu", "fp32")
    assert bench.measure(bundle, tmp_path, settings) == bench.Run(0.2, 0.03, None, None)
    metrics |= {"host_probe_p50_s": 1e-3, "host_steal_timed": 0.02}
    assert bench.measure(bundle, tmp_path, settings) == bench.Run(0.2, 0.03, 1e-3, 0.02)


def test_a_stolen_run_is_set_aside_and_the_plan_runs_again(
    bench: SimpleNamespace, suite: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = bench.timing_suite()[1:3]
    stolen = 2 * bench.STEAL_LIMIT
    steal = {a.name: [stolen, 0.0, 0.001, 0.0], b.name: [stolen] * 5}
    seconds = {a.name: [0.5, 0.1, 0.11, 0.12], b.name: [0.3, 0.31, 0.32, 0.33, 0.34]}

    def fake_measure(bundle, out, settings):
        (out / "traces").mkdir(parents=True, exist_ok=True)
        (out / "metrics.json").write_text("{}")
        name = out.name.split(".r")[0]
        return bench.Run(seconds[name].pop(0), 0.01, 1e-3, steal[name].pop(0))

    monkeypatch.setattr(suite, "measure", fake_measure)
    settings = bench.Settings(work=tmp_path, steps=3, warmup=1, precision="fp32", repeats=3)
    console = bench.Console(file=io.StringIO())
    aside: list[dict] = []
    runs = bench.measure_rounds((a, b), {2: "cpu"}, settings, console, [], set_aside=aside)
    # a: its stolen first run set aside, three quiet runs in the next rounds
    assert [r.seconds for r in runs[a.name]] == [0.1, 0.11, 0.12]
    # b: every run stolen; two set aside, then the rest count as measured
    assert [r.seconds for r in runs[b.name]] == [0.32, 0.33, 0.34]
    assert [(x["name"], x["round"], x["seconds"]) for x in aside] == [
        (a.name, 1, 0.5),
        (b.name, 1, 0.3),
        (b.name, 2, 0.31),
    ]
    folders = tmp_path / "runs"
    assert aside[0]["folder"] == str(folders / f"{a.name}.stolen1")
    assert {p.name for p in folders.iterdir()} == {
        a.name, f"{a.name}.r1", f"{a.name}.r2", f"{a.name}.stolen1",
        b.name, f"{b.name}.r1", f"{b.name}.r2", f"{b.name}.stolen1", f"{b.name}.stolen2",
    }  # fmt: skip
    assert not (folders / f"{a.name}.stolen1" / "traces").exists()
    assert (folders / a.name / "traces").is_dir()  # the kept first run keeps its traces
    assert "set aside (1.00% of the CPU stolen)" in console.file.getvalue()


def test_the_tables_name_the_runs_set_aside() -> None:
    assert set_aside_text([]) == ""
    aside = [{"name": "tp2", "round": 2, "seconds": 1.0, "steal": 0.047, "folder": "x"}]
    assert set_aside_text(aside) == (
        "; 1 run(s) set aside for steal time and run again: tp2 (4.7% stolen)"
    )
    result = {
        "machine": "vm",
        "load_average": {"start": [1.0, 1.0, 1.0], "end": [2.0, 2.0, 2.0]},
        "set_aside": aside,
    }
    assert machine_text(result) == (
        "Machine: vm; load average 1.0 at the start, 2.0 at the end; 1 run(s) set aside for "
        "steal time and run again: tp2 (4.7% stolen)"
    )


def test_the_middle_run_is_taken_among_the_quiet_runs(bench: SimpleNamespace) -> None:
    stolen = 2 * bench.STEAL_LIMIT
    runs = [
        bench.Run(0.30, 0.01, 2e-3, stolen),  # kept once the plan's set-aside budget was spent
        bench.Run(0.10, 0.01, 1e-3, 0.0),
        bench.Run(0.12, 0.01, 1e-3, None),
        bench.Run(0.11, 0.01, 1e-3, 0.001),
        bench.Run(0.50, 0.01, 4e-3, stolen),
    ]
    assert bench.quiet_indices(runs) == [1, 2, 3]
    # of all five the middle would be 0.12 s; of the quiet three it is 0.11 s
    assert bench.typical_index(runs) == 3
    assert bench.typical(runs, elasticity=1.0).seconds == 0.11
    all_stolen = [bench.Run(t, 0.01, 1e-3, stolen) for t in (0.3, 0.1, 0.2)]
    assert bench.quiet_indices(all_stolen) == [0, 1, 2]
    assert bench.typical(all_stolen).seconds == 0.2


def test_calibration_reads_only_the_quiet_calibration_runs(bench: SimpleNamespace) -> None:
    stolen = 2 * bench.STEAL_LIMIT
    names = [c.name for c in bench.calibration_cases(bench.REFERENCE_WORLD)]
    runs = {name: [bench.Run(0.1, 0.01, 1e-3, 0.0)] for name in names}
    runs[names[0]].append(bench.Run(0.3, 0.01, 9e-3, stolen))
    assert bench.calibration_probe_s(runs) == pytest.approx(1e-3)
    runs[names[1]] += [bench.Run(0.2, 0.01, 2e-3, 0.0), bench.Run(0.9, 0.01, 5e-3, stolen)]
    runs[names[2]].append(bench.Run(0.2, 0.01, 2e-3, None))
    elasticity, why = bench.calibration_elasticity(runs)
    # within names[1] and names[2] the quiet runs double both time and probe: slope 1
    assert why == "" and elasticity == pytest.approx(1.0)


def _fake_draws(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Replace the bench's profiling with one that writes a file and returns the test
    profile; the names of the files drawn, in order."""
    drawn: list[str] = []

    def fake_profile(path: Path, world: int, log: object) -> object:
        drawn.append(path.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
        return cpu_profile()

    monkeypatch.setattr(sys.modules["fidelity_profiles"], "measured", fake_profile)
    return drawn


def test_a_stolen_profile_draw_is_set_aside_and_drawn_again(
    bench: SimpleNamespace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn = _fake_draws(monkeypatch)
    # the steal counter, read before and after each draw: the first draw of draw 1 has a
    # whole second stolen (far above the limit), everything after none
    readings = iter([0.0, 1.0] + [1.0] * 20)
    settings = bench.Settings(work=tmp_path, steps=3, warmup=1, precision="fp32", draws=2)
    aside: list[dict] = []
    draws = bench.ProfileDraws(
        settings, (2,), bench.Console(file=io.StringIO()), aside, steal=readings.__next__
    )
    draws.merged()
    assert drawn == ["profile-2.draw1.json"] * 2 + ["profile-2.draw2.json"]
    (entry,) = aside
    assert entry["name"] == "profile-2.draw1" and entry["steal"] > bench.STEAL_LIMIT
    assert Path(entry["folder"]).name == "profile-2.draw1.json.stolen1"
    assert (
        Path(entry["folder"]).exists() and (tmp_path / "profiles" / "profile-2.draw1.json").exists()
    )


def test_a_profile_draw_is_drawn_again_at_most_max_set_aside_times(
    bench: SimpleNamespace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn = _fake_draws(monkeypatch)
    ticks = iter(range(100))  # a whole second stolen during every draw
    settings = bench.Settings(work=tmp_path, steps=3, warmup=1, precision="fp32")
    aside: list[dict] = []
    draws = bench.ProfileDraws(
        settings, (2,), bench.Console(file=io.StringIO()), aside, steal=lambda: next(ticks)
    )
    draws.merged()
    assert len(drawn) == bench.MAX_SET_ASIDE + 1  # the last one is kept
    assert len(aside) == bench.MAX_SET_ASIDE
