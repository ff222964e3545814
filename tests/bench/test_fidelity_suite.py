"""The suite of the fidelity benchmark (bench/fidelity_suite.py, bench/fidelity_pick.py and
the arguments of bench/fidelity.py, loaded by path: bench/ is not a package): the plans it
covers, their validity, the planner's pick among them, the labels and the usage errors."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from specs.plan import ParallelPlan
from specs.rules import check_plan
from tests.bench.fidelity_rows import row


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
