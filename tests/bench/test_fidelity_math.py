"""The fidelity benchmark's arithmetic (`reports.fidelity`) on hand-made rows, and the
suite of `bench/fidelity.py` (loaded by path: bench/ is not a package)."""

from __future__ import annotations

import dataclasses
import io
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from profiles.store import load_profile
from reports.fidelity import (
    COLUMNS,
    FidelityRow,
    kendall_tau,
    median_abs,
    median_run,
    percentile_abs,
    pick_within,
    repeat_spread,
    row_cells,
    row_to_json,
    summarize,
    summary_text,
    summary_to_json,
)
from reports.fidelity_tables import pick_line
from specs.errors import SpecError
from specs.plan import ParallelPlan
from specs.rules import check_plan
from tests.costmodel.cpu_fixture import cpu_profile


def row(name: str, measured: float, predicted: float | None, group: str = "g") -> FidelityRow:
    return FidelityRow(
        name=name,
        group=group,
        plan=name,
        covers=(),
        world_size=2,
        measured_time_s=measured,
        predicted_time_s=predicted,
        measured_memory_gib=1.0,
        predicted_memory_gib=None if predicted is None else 1.0 + (predicted - measured),
    )


# ---- errors and percentiles ------------------------------------------------------------


def test_errors_are_signed_and_relative_to_the_measurement() -> None:
    r = row("a", measured=0.2, predicted=0.25)
    assert r.time_error == pytest.approx(0.25)  # (0.25 - 0.2) / 0.2
    assert r.memory_error == pytest.approx(0.05)  # (1.05 - 1.0) / 1.0
    assert row("b", measured=0.2, predicted=0.1).time_error == pytest.approx(-0.5)
    missing = row("c", measured=0.2, predicted=None)
    assert missing.time_error is None and missing.memory_error is None


def test_median_and_percentile_of_absolute_errors() -> None:
    assert median_abs([0.1, -0.3, 0.2, None]) == pytest.approx(0.2)
    assert median_abs([None]) is None
    # numpy linear interpolation: 11 evenly spaced values put p90 on the 10th
    assert percentile_abs([i / 10 for i in range(11)], 90) == pytest.approx(0.9)
    # between two values: 0.1 + 0.9 * (0.2 - 0.1)
    assert percentile_abs([-0.1, 0.2], 90) == pytest.approx(0.19)
    assert percentile_abs([], 90) is None
    with pytest.raises(SpecError, match=r"\[0, 100\]"):
        percentile_abs([0.1], 101)


def test_kendall_tau_counts_concordant_pairs() -> None:
    assert kendall_tau([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert kendall_tau([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)
    # pairs: (2,3) discordant, the other five concordant: (5 - 1) / 6
    assert kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)
    assert kendall_tau([1.0], [2.0]) is None
    assert kendall_tau([1, 1, 1], [1, 2, 3]) is None  # one side constant: undefined
    with pytest.raises(SpecError, match="one length"):
        kendall_tau([1, 2], [1])


def test_pick_rule_allows_five_percent() -> None:
    assert pick_within(1.0, [1.0, 2.0])
    assert pick_within(1.04, [1.0, 1.3])
    assert pick_within(1.05, [1.0])  # the boundary is inside
    assert not pick_within(1.06, [1.0, 1.2])
    assert pick_within(0.9, [1.0])  # the pick is itself the fastest


# ---- summary -----------------------------------------------------------------------------


def test_summary_of_hand_made_rows() -> None:
    rows = [
        row("a", measured=1.0, predicted=1.1),  # +10%
        row("b", measured=2.0, predicted=1.6),  # -20%
        row("c", measured=4.0, predicted=4.2),  # +5%
        row("d", measured=3.0, predicted=None),  # refused: no figure uses it
        row("x", measured=0.5, predicted=0.5, group="other"),  # 0%, fastest but elsewhere
    ]
    s = summarize(rows, pick="a")
    assert (s.num_plans, s.num_predicted) == (5, 4)
    assert s.median_abs_error == pytest.approx(0.075)  # median of 0, .05, .1, .2
    assert s.p90_abs_error == pytest.approx(0.17)  # 0.1 + 0.7 * (0.2 - 0.1)
    # memory errors: +0.1, -0.4, +0.2, 0 on 1 GiB
    assert s.memory_median_abs_error == pytest.approx(0.15)
    # predicted order 0.5, 1.1, 1.6, 4.2 matches measured 0.5, 1, 2, 4
    assert s.kendall_tau == pytest.approx(1.0)
    assert s.pick_within_5pct is True  # "a" is the fastest of group g; "x" is not compared
    assert summarize(rows, pick="b").pick_within_5pct is False
    assert summarize(rows).pick_within_5pct is None


def test_summary_rejects_a_pick_that_is_not_a_row() -> None:
    with pytest.raises(SpecError, match="not one of the rows"):
        summarize([row("a", 1.0, 1.0)], pick="z")


def test_json_keys() -> None:
    data = summary_to_json(summarize([row("a", 1.0, 1.2), row("b", 2.0, 1.0)], pick="a"))
    for key in (
        "median_abs_error",
        "p90_abs_error",
        "memory_median_abs_error",
        "kendall_tau",
        "pick_within_5pct",
    ):
        assert key in data
    assert data["kendall_tau"] == pytest.approx(-1.0)
    r = row_to_json(row("a", 1.0, 1.2))
    assert r["iteration_time_error"] == pytest.approx(0.2)
    assert r["measured_iteration_time_s"] == 1.0
    assert r["host_probe_s"] is None


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


# ---- the suite of bench/fidelity.py ----------------------------------------------------


def test_timing_suite_covers_the_features(bench: SimpleNamespace) -> None:
    suite = bench.timing_suite()
    assert len(suite) >= 10
    assert len({c.name for c in suite}) == len(suite)
    assert {c.plan.world_size for c in suite} <= {1, 2}
    covered = {f for c in suite for f in c.covers}
    needed = {
        "tp",
        "sp",
        "pp-1f1b",
        "pp-interleaved",
        "ddp-buckets",
        "overlap-grad-reduce",
        "distributed-optimizer",
        "ep",
        "cp",
        "recompute-selective",
        "recompute-full",
    }
    assert needed <= covered
    assert any(c.plan.tp > 1 and not c.plan.sequence_parallel for c in suite)
    assert len({c.plan.micro_batch_size for c in suite}) >= 2
    assert {c.plan.world_size for c in bench.coverage_suite()} == {4}


def test_every_plan_is_valid(bench: SimpleNamespace) -> None:
    cases = (*bench.timing_suite(), *bench.coverage_suite(), *bench.CALIBRATION_CASES)
    for case in cases:
        b = bench.bundle_of(case, "h100-sxm-80gb", "fp32")
        assert check_plan(b.model, b.cluster, b.job, b.plan) == [], case.name


def test_calibration_runs_are_not_suite_runs(bench: SimpleNamespace) -> None:
    suite = {(c.model, c.plan, c.seq_length) for c in bench.timing_suite()}
    assert all((c.model, c.plan, c.seq_length) not in suite for c in bench.CALIBRATION_CASES)


def test_pick_reuses_a_suite_run_or_runs_the_new_plan(bench: SimpleNamespace) -> None:
    cases = list(bench.timing_suite())
    rows = [row(c.name, 1.0, 1.0, group=c.group) for c in cases]
    ran = []

    def run(case):
        ran.append(case.name)
        return row(case.name, 0.5, 0.6, group=case.group)

    main = next(c for c in cases if c.name == bench.PICK_CASE)
    assert bench.add_pick(main.plan, "pick", cases, rows, run) == main.name
    assert ran == []
    new_plan = ParallelPlan(dp=2, micro_batch_size=2, distributed_optimizer=True)
    assert bench.add_pick(new_plan, "pick", cases, rows, run) == "pick"
    assert ran == ["pick"] and rows[-1].name == "pick" and cases[-1].plan == new_plan
    details = bench.pick_details(rows, "pick", "")
    assert details["best_measured"] == "pick" and details["measured_s"] == 0.5
    assert bench.pick_details(rows, None, "no fit")["error"] == "no fit"


def test_knob_label_names_buckets_and_overlap(bench: SimpleNamespace) -> None:
    plan = ParallelPlan(dp=2, ddp_bucket_size=100_000, overlap_grad_reduce=True)
    assert bench.knob_label(plan) == "tp1 pp1 dp2 mbs1 bucket100K overlap-grad-reduce"


def test_text_cells_and_summary_line() -> None:
    cells = row_cells(row_to_json(row("a", measured=0.2, predicted=0.25)))
    assert cells == ["a", "a", "250.0", "200.0", "+25.0%", "1075.2", "1024.0", "+5.0%", "1"]
    assert len(cells) == len(COLUMNS)
    missing = row_cells(row_to_json(row("b", measured=0.2, predicted=None)))
    assert missing[2] == "n/a" and missing[4] == "n/a"
    text = summary_text(summary_to_json(summarize([row("a", 1.0, 1.1), row("b", 2.0, 1.6)])))
    assert text == (
        "median |time error| 15.0%, p90 19.0%, median |memory error| 25.0%, Kendall tau 1.00, "
        "pick within 5%: n/a (2/2 plans predicted)"
    )


# ---- repeated runs ------------------------------------------------------------------------


def test_repeat_spread_is_the_median_absolute_deviation_over_the_median() -> None:
    # median 0.21; deviations 0.09, 0.01, 0, 0.01, 0.03 -> median 0.01
    assert repeat_spread([0.3, 0.2, 0.21, 0.22, 0.18]) == pytest.approx(0.01 / 0.21)
    assert repeat_spread([0.2]) is None
    assert repeat_spread([0.2, 0.2]) == 0.0


def test_the_median_run_is_the_middle_one_or_the_lower_middle() -> None:
    assert median_run([0.3, 0.1, 0.2]) == 2
    assert median_run([0.4, 0.1, 0.3, 0.2]) == 3  # lower middle of 0.1 0.2 0.3 0.4
    assert median_run([0.5]) == 0
    with pytest.raises(SpecError, match="without a single run"):
        median_run([])


def test_rows_keep_runs_and_the_summary_the_median_spread() -> None:
    rows = [
        dataclasses.replace(row("a", 1.0, 1.1), runs=3, repeat_spread=0.02),
        dataclasses.replace(row("b", 1.0, 1.1), runs=5, repeat_spread=0.08),
        row("c", 1.0, 1.1),  # one run: no spread
    ]
    data = summary_to_json(summarize(rows))
    assert data["median_repeat_spread"] == pytest.approx(0.05)
    assert row_to_json(rows[1])["runs"] == 5
    assert row_cells(row_to_json(rows[1]))[-1] == "5 (±8.0%)"
    assert summary_text(data).endswith("; median run-to-run spread 5.0%")
    assert summary_to_json(summarize(rows[2:]))["median_repeat_spread"] is None


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


def test_render_of_a_missing_result_is_a_usage_error(
    bench: SimpleNamespace, tmp_path: Path
) -> None:
    with pytest.raises(SystemExit) as stop:
        bench.parse_args(["--render", str(tmp_path / "fidelity.json")])
    assert stop.value.code == 2


@pytest.mark.parametrize("flag", ["--repeats", "--draws"])
def test_counts_below_one_are_usage_errors(
    bench: SimpleNamespace, flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        bench.parse_args([flag, "0"])
    assert stop.value.code == 2
    assert f"{flag} must be at least 1, got 0" in capsys.readouterr().err
    assert bench.parse_args([]).draws == 3


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
