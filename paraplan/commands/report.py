"""`paraplan report RUN`: compare prediction and measurement, write the HTML report."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from paraplan.commands import COMMAND_HELP
from profiles.lookup import host_probe_s
from profiles.store import load_profile
from reports.compare import compare, comparison_to_json
from reports.html import render_report
from reports.run_dir import load_run
from reports.traces import write_traces
from specs.errors import SpecError

NAME = "report"
HELP = COMMAND_HELP[NAME]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="run folder written by `paraplan execute ... --out RUN`")
    parser.add_argument(
        "-o", "--output", default=None, help="HTML file to write (default: RUN/report.html)"
    )


def write_report(run: str | Path, output: str | Path | None = None) -> tuple[Path, dict]:
    """Write RUN/comparison.json, both Chrome traces and the HTML report.

    Returns the report path and the comparison JSON. A prediction-only folder (no
    measurement) gets the prediction page and no comparison.
    """
    run_dir = load_run(run, require_measured=False)
    out = Path(output) if output else run_dir.path / "report.html"
    comparison = None
    summary: dict = {}
    reference_s = _reference_probe_s(run_dir.bundle.cluster.hardware)
    if run_dir.measured is not None:
        comparison = compare(
            run_dir.predicted,
            run_dir.measured,
            plan=run_dir.bundle.plan,
            estimate=run_dir.estimate,
            metrics=run_dir.metrics,
        )
        summary = comparison_to_json(comparison) | _probe_json(run_dir.metrics, reference_s)
        (run_dir.path / "comparison.json").write_text(json.dumps(summary, indent=2) + "\n")
    write_traces(run_dir.path, run_dir.predicted, run_dir.measured)
    html = render_report(
        run_dir.bundle,
        run_dir.estimate,
        run_dir.predicted,
        measured=run_dir.measured,
        metrics=run_dir.metrics,
        comparison=comparison,
        candidates=run_dir.candidates,
        host_probe_reference_s=reference_s,
    )
    try:
        out.write_text(html)
    except OSError as exc:
        raise SpecError(f"cannot write the report to {out}: {exc.strerror or exc}") from exc
    return out, summary


def _reference_probe_s(hardware: str) -> float | None:
    """The host probe of the profile the prediction used; None when that profile did not
    time it or is no longer where the run's plan.json says (the report then shows the
    run's probe alone)."""
    try:
        return host_probe_s(load_profile(hardware))
    except SpecError:
        return None


def _probe_json(metrics: dict | None, reference_s: float | None) -> dict:
    """``host_probe_measured_s`` (the run's median probe) and ``host_probe_reference_s``
    (the profile's) when the run probed the host."""
    measured = (metrics or {}).get("host_probe_p50_s")
    if measured is None:
        return {}
    return {"host_probe_measured_s": measured, "host_probe_reference_s": reference_s}


def _probe_line(summary: dict) -> str:
    measured, reference = summary["host_probe_measured_s"], summary["host_probe_reference_s"]
    if reference is None:
        return f"host probe: {measured * 1e3:.3f} ms (the profile did not time it)"
    change = measured / reference - 1
    speed = f"{abs(change):.0%} {'slower' if change > 0 else 'faster'}"
    return (
        f"host probe: {measured * 1e3:.3f} ms during the run, {reference * 1e3:.3f} ms when "
        f"profiled: the host ran {speed} during the run"
    )


def run(args: argparse.Namespace) -> int:
    out, summary = write_report(args.run, args.output)
    print(runtime_line(args.run))
    if summary:
        print(
            f"iteration time: predicted {summary['iteration_time_predicted_s']:.4g} s, "
            f"measured {summary['iteration_time_measured_s']:.4g} s "
            f"({summary['iteration_time_error'] * 100:+.1f}%, {summary['verdict']})"
        )
    if summary.get("host_probe_measured_s") is not None:
        print(_probe_line(summary))
    failure = failure_line(args.run)
    if failure:
        print(failure)
    print(f"report: {out}")
    return 0


def failure_line(run: str | Path) -> str:
    """``the run failed: <cause>`` for a failed run folder, else empty."""
    path = Path(run) / "metrics.json"
    if not path.is_file():
        return ""
    metrics = json.loads(path.read_text())
    if metrics.get("status") != "failed":
        return ""
    cause = (metrics.get("failure") or {}).get("cause", "cause not recorded")
    return f"the run failed: {cause} ({len(metrics.get('loss') or [])} measured steps ran)"


def runtime_line(run: str | Path) -> str:
    """Which runtime model the run's prediction priced (``estimate.json``'s ``runtime``)."""
    path = Path(run) / "estimate.json"
    estimate = json.loads(path.read_text()) if path.is_file() else {}
    return f"prediction: {estimate.get('runtime', 'unrecorded')} runtime"
