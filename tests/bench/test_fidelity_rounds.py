"""The measurement rounds of the fidelity benchmark (bench/fidelity_rounds.py and
bench/fidelity_profiles.py, loaded by path: bench/ is not a package): repeats and retries
round by round, and the profile draws spread over the rounds and merged."""

from __future__ import annotations

import dataclasses
import io
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from profiles.store import load_profile
from tests.costmodel.cpu_fixture import cpu_profile


def test_rounds_run_every_plan_its_repeats_and_retry_failures(
    bench: SimpleNamespace, suite: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, c, d = bench.timing_suite()[:4]
    times = {
        a.name: [0.10, 0.102, 0.5, 0.4],
        b.name: [0.3, 0.2, 0.25, 0.4, 0.199],
        c.name: [],  # every run fails
        d.name: [None, 0.3, 0.305, 0.31, 0.32],  # the first run fails (a reset connection)
    }
    calls: list[tuple[str, str]] = []

    def fake_measure(bundle, out, settings):
        name = out.name.split(".r")[0]
        calls.append((name, out.name))
        (out / "traces").mkdir(parents=True, exist_ok=True)
        (out / "metrics.json").write_text("{}")
        value = times[name].pop(0) if times[name] else None
        if value is None:
            raise bench.SpecError("rank 0 failed: [/gloo/pair.cc:553] Connection reset")
        return bench.Run(seconds=value, gib=0.01, probe_s=1e-3)

    monkeypatch.setattr(suite, "measure", fake_measure)
    settings = bench.Settings(work=tmp_path, steps=3, warmup=1, precision="fp32", repeats=3)
    failures: list[dict[str, str]] = []
    console = bench.Console(file=io.StringIO())
    runs = bench.measure_rounds((a, b, c, d), {1: "cpu", 2: "cpu"}, settings, console, failures)
    assert [r.seconds for r in runs[a.name]] == [0.10, 0.102, 0.5]  # three runs each
    assert [r.seconds for r in runs[b.name]] == [0.3, 0.2, 0.25]
    assert [r.seconds for r in runs[d.name]] == [0.3, 0.305, 0.31]  # a fourth round for d
    assert c.name not in runs  # two failed runs, none good: left out, not retried again
    assert bench.typical(runs[b.name]).seconds == 0.25
    assert [f["name"] for f in failures] == [c.name, d.name, c.name]
    assert "pair.cc:553" in console.file.getvalue()  # printed as text, not markup
    assert [out for name, out in calls if name == b.name] == [
        b.name,
        f"{b.name}.r1",
        f"{b.name}.r2",
    ]
    assert [out for name, out in calls if name == d.name] == [
        d.name,
        d.name,
        f"{d.name}.r1",
        f"{d.name}.r2",
    ]
    # a case's first run keeps its traces (its report), a repeat keeps only its figures
    runs_dir = tmp_path / "runs"
    assert (runs_dir / b.name / "traces").is_dir()
    assert not (runs_dir / f"{b.name}.r1" / "traces").exists()
    assert (runs_dir / f"{b.name}.r1" / "metrics.json").exists()
    # round by round: both plans run before either runs again
    assert [name for name, _ in calls][:4] == [a.name, b.name, c.name, d.name]


def test_profile_draws_spread_over_the_rounds_and_merge_into_the_median(
    bench: SimpleNamespace, suite: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert bench.draw_rounds(5, 3) == [0, 2, 5]  # before the first, mid-way, after the last
    assert bench.draw_rounds(1, 3) == [0, 0, 1]
    assert bench.draw_rounds(4, 1) == [0]
    w1, w2 = bench.timing_suite()[0], bench.timing_suite()[1]
    assert (w1.plan.world_size, w2.plan.world_size) == (1, 2)
    events: list[str] = []

    def fake_profile(path: Path, world: int, log: object) -> object:
        events.append(f"profile {path.name}")
        overhead = (3e-6, 1e-6, 2e-6)[int(path.name.split(".draw")[1][0]) - 1]
        base = cpu_profile()
        return dataclasses.replace(
            base, compute=dataclasses.replace(base.compute, op_overhead_s=overhead)
        )

    def fake_measure(bundle, out, settings):
        events.append(f"run {out.name} on {Path(bundle.cluster.hardware).name}")
        return bench.Run(seconds=0.1, gib=0.01, probe_s=1e-3)

    monkeypatch.setattr(sys.modules["fidelity_profiles"], "measured", fake_profile)
    monkeypatch.setattr(suite, "measure", fake_measure)
    settings = bench.Settings(
        work=tmp_path, steps=3, warmup=1, precision="fp32", repeats=3, draws=3
    )
    console = bench.Console(file=io.StringIO())
    draws = bench.ProfileDraws(settings, (2, 1), console, steal=lambda: None)
    runs = bench.measure_rounds((w1, w2), draws.paths(), settings, console, [], draws.before_round)
    profiles = draws.merged()
    assert len(runs[w1.name]) == len(runs[w2.name]) == 3
    draw = "profile profile-{}.draw{}.json".format
    assert events == [
        draw(2, 1), draw(1, 1),
        f"run {w1.name} on profile-1.json", f"run {w2.name} on profile.json",
        f"run {w1.name}.r1 on profile-1.json", f"run {w2.name}.r1 on profile.json",
        draw(2, 2), draw(1, 2),  # before the third round (draw_rounds(3, 3) == [0, 2, 3])
        f"run {w1.name}.r2 on profile-1.json", f"run {w2.name}.r2 on profile.json",
        draw(2, 3), draw(1, 3),
    ]  # fmt: skip
    assert profiles[2][0] == str(tmp_path / "profile.json")
    assert profiles[1][0] == str(tmp_path / "profile-1.json")
    for world in (1, 2):
        assert profiles[world][1].compute.op_overhead_s == pytest.approx(2e-6)
        saved = load_profile(profiles[world][0])
        assert saved.compute.op_overhead_s == pytest.approx(2e-6)
        assert "median of 3 profiles" in saved.provenance.notes[-1]
        assert saved.name == Path(profiles[world][0]).stem


def test_one_draw_is_the_profile_itself(
    bench: SimpleNamespace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken: list[Path] = []

    def fake_profile(path: Path, world: int, log: object) -> object:
        taken.append(path)
        return cpu_profile()

    monkeypatch.setattr(sys.modules["fidelity_profiles"], "measured", fake_profile)
    settings = bench.Settings(work=tmp_path, steps=3, warmup=1, precision="fp32", repeats=5)
    console = bench.Console(file=io.StringIO())
    draws = bench.ProfileDraws(settings, (2,), console, steal=lambda: None)
    draws.before_round(0)
    draws.before_round(1)
    profiles = draws.merged()
    assert taken == [tmp_path / "profile.json"]
    assert profiles[2][0] == str(tmp_path / "profile.json")
