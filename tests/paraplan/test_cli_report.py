"""`paraplan report`'s host-probe line: how fast the host ran during the run."""

from __future__ import annotations

import json

from paraplan.commands.report import _probe_json, _probe_line, _reference_probe_s, failure_line


def test_probe_figures_join_the_comparison_only_when_the_run_probed():
    assert _probe_json({"iteration_time_p50_s": 0.1}, 6e-4) == {}
    assert _probe_json(None, 6e-4) == {}
    assert _probe_json({"host_probe_p50_s": 8e-4}, 6e-4) == {
        "host_probe_measured_s": 8e-4,
        "host_probe_reference_s": 6e-4,
    }


def test_probe_line_says_how_much_slower_or_faster_the_host_ran():
    slower = _probe_line({"host_probe_measured_s": 9e-4, "host_probe_reference_s": 6e-4})
    assert slower == (
        "host probe: 0.900 ms during the run, 0.600 ms when profiled: the host ran 50% "
        "slower during the run"
    )
    faster = _probe_line({"host_probe_measured_s": 4.8e-4, "host_probe_reference_s": 6e-4})
    assert faster.endswith("the host ran 20% faster during the run")
    alone = _probe_line({"host_probe_measured_s": 5e-4, "host_probe_reference_s": None})
    assert alone == "host probe: 0.500 ms (the profile did not time it)"


def test_reference_is_none_for_a_profile_without_probe_or_gone(tmp_path):
    assert _reference_probe_s("h100-sxm-80gb") is None  # stored datasheet profile
    assert _reference_probe_s(str(tmp_path / "moved.json")) is None


def test_failure_line_names_the_cause_of_a_failed_run_only(tmp_path):
    metrics = tmp_path / "metrics.json"
    assert failure_line(tmp_path) == ""  # no metrics: a prediction-only folder
    metrics.write_text(json.dumps({"status": "completed", "loss": [1.0]}))
    assert failure_line(tmp_path) == ""
    failed = {"status": "failed", "loss": [6.0, 5.0], "failure": {"cause": "rank 1 killed"}}
    metrics.write_text(json.dumps(failed))
    assert failure_line(tmp_path) == "the run failed: rank 1 killed (2 measured steps ran)"
