"""`paraplan demo`: the profile cache, the summary lines, and the reduced demo end to end
(profile, plan, execute, report on two gloo ranks), run through a parser built from the
command's own `add_arguments` (the command registry is the lead's)."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import json
import socket
from pathlib import Path

import pytest

from paraplan.commands import demo
from profiles.store import load_profile, save_profile
from specs.errors import SpecError


def measured_here(path: Path, *, host: str | None = None, version: str | None = None) -> Path:
    """The stored H100 profile (8 GPUs per node) relabelled as measured on ``host`` (default
    this one) by paraplan ``version`` (default this one), saved at ``path``."""
    base = load_profile("h100-sxm-80gb")
    provenance = dataclasses.replace(
        base.provenance,
        method="measured",
        host=f"{host or socket.gethostname()} (H100, 8 GPUs)",
        tool_version=version or importlib.metadata.version("paraplan"),
    )
    save_profile(dataclasses.replace(base, provenance=provenance), path)
    return path


def test_cached_profile_is_reused_only_when_made_here_for_the_same_world(tmp_path) -> None:
    path = measured_here(tmp_path / "profile.json")
    assert demo.cached_profile(path, 8) is not None
    assert demo.cached_profile(path, 2) is None  # measured for another world size
    other = measured_here(tmp_path / "other.json", host="elsewhere")
    assert demo.cached_profile(other, 8) is None
    assert demo.cached_profile(tmp_path / "missing.json", 2) is None
    derived = save_profile(load_profile("h100-sxm-80gb"), tmp_path / "derived.json")
    assert demo.cached_profile(derived, 8) is None  # derived from datasheets, not measured
    (tmp_path / "broken.json").write_text("{")
    assert demo.cached_profile(tmp_path / "broken.json", 2) is None
    older = measured_here(tmp_path / "older.json", version="0.0.1")
    assert demo.cached_profile(older, 8) is None  # another version's probes


def _profiler_exiting(codes: list[int], tmp_path: Path):
    """A stand-in for `paraplan profile` that exits with ``codes`` in turn, writing the
    profile when it succeeds; the argument lists it was called with."""
    calls: list[list[str]] = []

    def run_command(module, argv: list[str]) -> int:
        assert module is demo.profile_command
        calls.append(argv)
        code = codes[len(calls) - 1]
        if code == 0:
            measured_here(Path(argv[argv.index("--out") + 1]))
        return code

    return calls, run_command


@pytest.mark.parametrize(
    ("codes", "tries", "ok"),
    [
        ([demo.profile_command.CRASHED_EXIT, 0], 2, True),  # a native crash: once more
        ([demo.profile_command.CRASHED_EXIT] * 2, 2, False),  # twice: give up
        ([1, 0], 1, False),  # any other failure stops the demo at once
        ([0], 1, True),
    ],
)
def test_a_native_crash_while_profiling_is_retried_once(tmp_path, monkeypatch, codes, tries, ok):
    from rich.console import Console

    calls, fake = _profiler_exiting(codes, tmp_path)
    monkeypatch.setattr(demo, "run_command", fake)
    console = Console(record=True, width=200)
    got = demo.ensure_profile(tmp_path / "profile.json", 8, console)
    assert len(calls) == tries and (got is not None) == ok
    said = console.export_text()
    assert ("profiling again (attempt 2 of 2)" in said) == (
        codes[0] == demo.profile_command.CRASHED_EXIT
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "no-such-model"], "unknown model preset 'no-such-model'"),
        (["--nproc", "0"], "--nproc must be >= 1, got 0"),
    ],
)
def test_bad_input_fails_before_profiling(tmp_path, monkeypatch, argv, message) -> None:
    # a bad --model once failed after minutes of profiling; --nproc 0 meant the default
    monkeypatch.setattr(demo, "ensure_profile", lambda *a: pytest.fail("profiling started"))
    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    with pytest.raises(SpecError, match=message):
        demo.run(parser.parse_args([*argv, "--out", str(tmp_path / "demo")]))


def test_summary_lines() -> None:
    comparison = {
        "iteration_time_predicted_s": 0.05,
        "iteration_time_measured_s": 0.1,
        "iteration_time_error": -0.5,
        "verdict": "off",
    }
    lines = demo.summary_lines(comparison, {"mfu": 0.4}, {"mfu": 0.2})
    assert lines == [
        "iteration time: predicted 50.0 ms, measured 100.0 ms (-50.0%)",
        "MFU (model FLOPs): predicted 40.0%, measured 20.0%",
        "verdict: off",
    ]
    assert "measured n/a" in demo.summary_lines(comparison, {"mfu": 0.4}, {"mfu": None})[1]


@pytest.mark.slow
def test_reduced_demo_runs_the_whole_loop(tmp_path, capsys) -> None:
    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    out = tmp_path / "demo"
    assert demo.run(parser.parse_args(["--out", str(out), "--reduced", "--nproc", "2"])) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    report = out / "run" / "report.html"
    assert lines[0] == f"report: {report}"
    assert lines[1].startswith("iteration time: predicted ")
    assert lines[2].startswith("MFU (model FLOPs): predicted ")
    assert lines[3].split(": ")[1] in {"within 5%", "within 15%", "off"}
    assert report.read_text().lstrip().lower().startswith("<!doctype html")
    comparison = json.loads((out / "run" / "comparison.json").read_text())
    assert comparison["iteration_time_measured_s"] > 0
    assert (out / "plan" / "plan.json").is_file() and (out / "plan" / "candidates.csv").is_file()
    # the profile of this run is the cache of the next one
    assert demo.cached_profile(out / "profile.json", 2) is not None
