"""Reading a run folder (`reports.run_dir`) and writing its Chrome traces
(`reports.traces`). `sample_run` and `write_run` come from conftest.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from paraplan.cli import main
from reports.run_dir import check_estimate, check_metrics, load_run
from reports.traces import write_traces
from specs.errors import SpecError
from specs.timeline import LANES


def test_load_run_round_trip(tmp_path: Path, sample_run: Any, write_run: Any) -> None:
    folder = write_run(tmp_path / "run", sample_run)
    (folder / "candidates.json").write_text(json.dumps(sample_run.candidates))
    run = load_run(folder)
    assert run.bundle == sample_run.bundle
    assert run.predicted == sample_run.predicted
    assert run.measured == sample_run.measured
    assert run.metrics == sample_run.metrics
    assert run.estimate == sample_run.estimate
    assert run.candidates == sample_run.candidates


def test_missing_files_name_the_command(tmp_path: Path, sample_run: Any, write_run: Any) -> None:
    folder = write_run(tmp_path / "plan", sample_run, measured=False)
    with pytest.raises(SpecError, match=r"missing measured\.json.*paraplan execute"):
        load_run(folder)
    run = load_run(folder, require_measured=False)
    assert run.measured is None and run.metrics is None and run.candidates is None
    (folder / "plan.json").unlink()
    with pytest.raises(SpecError, match=r"missing plan\.json.*paraplan plan --out"):
        load_run(folder, require_measured=False)
    with pytest.raises(SpecError, match="does not exist"):
        load_run(tmp_path / "nowhere")


def test_swapped_timeline_files_are_rejected(
    tmp_path: Path, sample_run: Any, write_run: Any
) -> None:
    folder = write_run(tmp_path / "run", sample_run)
    measured = (folder / "measured.json").read_text()
    (folder / "predicted.json").write_text(measured)
    with pytest.raises(SpecError, match="source is 'measured'"):
        load_run(folder)


def test_estimate_and_metrics_keys_are_checked() -> None:
    good = {"iteration_time_s": 1.0, "tokens_per_s": 2.0, "mfu": 0.4, "peak_memory_gib": 3.0}
    assert check_estimate(good) is good
    with pytest.raises(SpecError, match="missing key 'mfu'"):
        check_estimate({k: v for k, v in good.items() if k != "mfu"})
    with pytest.raises(SpecError, match="'tokens_per_s' must be a number"):
        check_estimate({**good, "tokens_per_s": "fast"})
    with pytest.raises(SpecError, match="'memory' must be a list"):
        check_estimate({**good, "memory": {"stage": 0}})
    with pytest.raises(SpecError, match="'iteration_time_s' must be a list of numbers"):
        check_metrics({"iteration_time_s": 1.0})
    with pytest.raises(SpecError, match="'loss' must be a list of numbers"):
        check_metrics({"iteration_time_s": [1.0], "loss": [1.0, None]})


def test_traces_share_lane_names(tmp_path: Path, sample_run: Any) -> None:
    paths = write_traces(tmp_path, sample_run.predicted, sample_run.measured)
    assert [p.name for p in paths] == ["predicted.trace.json", "measured.trace.json"]
    traces = [json.loads(p.read_text()) for p in paths]
    lane_sets = []
    for trace in traces:
        threads = {
            (e["pid"], e["tid"]): e["args"]["name"]
            for e in trace["traceEvents"]
            if e["ph"] == "M" and e["name"] == "thread_name"
        }
        lane_sets.append({(tid, name) for (_, tid), name in threads.items()})
        spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
        assert spans and all(e["dur"] >= 0 for e in spans)
        assert {e["tid"] for e in spans} <= {tid for tid, _ in lane_sets[-1]}
    assert lane_sets[0] == lane_sets[1] == set(enumerate(LANES))
    first = min(
        (e for e in traces[0]["traceEvents"] if e["ph"] == "X"), key=lambda e: (e["ts"], e["pid"])
    )
    source = min(sample_run.predicted.events, key=lambda e: (e.start_s, e.rank))
    assert first["ts"] == pytest.approx(source.start_s * 1e6)  # microseconds
    assert write_traces(tmp_path / "p", sample_run.predicted) == (
        tmp_path / "p" / "predicted.trace.json",
    )
    with pytest.raises(SpecError, match="predicted timeline first"):
        write_traces(tmp_path, sample_run.measured, sample_run.predicted)


@pytest.mark.parametrize("lost", ["measured.json", "metrics.json"])
def test_a_run_that_lost_one_measurement_file_is_refused_not_shown_as_a_plan(
    tmp_path: Path, sample_run: Any, write_run: Any, lost: str, capsys: Any
) -> None:
    folder = write_run(tmp_path / "run", sample_run)
    (folder / lost).unlink()
    with pytest.raises(SpecError, match=rf"missing {lost} beside the run's other measurement"):
        load_run(folder, require_measured=False)
    assert main(["report", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"paraplan report: error: {folder}: missing {lost} beside")
    assert not (folder / "report.html").exists()


def test_a_failed_runs_metrics_alone_are_a_run_folder(
    tmp_path: Path, sample_run: Any, write_run: Any
) -> None:
    folder = write_run(tmp_path / "run", sample_run)
    (folder / "measured.json").unlink()
    (folder / "metrics.json").write_text(json.dumps({**sample_run.metrics, "status": "failed"}))
    assert load_run(folder, require_measured=False).metrics["status"] == "failed"


def test_a_file_given_as_the_run_folder_is_named_as_a_file(tmp_path: Path) -> None:
    (tmp_path / "plan.json").write_text("{}")
    with pytest.raises(SpecError, match=r"plan\.json is not a folder"):
        load_run(tmp_path / "plan.json")


def test_a_failed_run_given_to_calibrate_is_named_as_failed_with_its_cause(
    tmp_path: Path, sample_run: Any, write_run: Any
) -> None:
    folder = write_run(tmp_path / "run", sample_run)
    (folder / "measured.json").unlink()
    failure = {"cause": "interrupted by SIGTERM; the launcher stopped every rank"}
    metrics = {**sample_run.metrics, "status": "failed", "failure": failure}
    (folder / "metrics.json").write_text(json.dumps(metrics))
    ran = len(metrics["iteration_time_s"])
    with pytest.raises(SpecError) as caught:
        load_run(folder)
    assert str(caught.value) == (
        f"{folder}: the run failed (interrupted by SIGTERM; the launcher stopped every rank; "
        f"{ran} measured steps ran) and has no measured timeline; leave it out, or run the "
        "plan again to completion (`paraplan execute PLAN.json --out RUN`)"
    )
