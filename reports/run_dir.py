"""Read a run folder: the contract between the executor, the command line and the reports.

A run folder ``RUN`` holds (the command that writes each file is in `WRITERS`):

- ``plan.json``: a `specs.PlanBundle` (model, cluster, job, plan);
- ``estimate.json``: the cost model's estimate (iteration time, MFU, memory, breakdown);
- ``predicted.json`` / ``measured.json``: the two `specs.Timeline`s;
- ``metrics.json``: per-step iteration times and loss, peak memory per rank, collectives;
- ``candidates.json`` (optional): the search's top candidates and why the winner won.

Estimate and metrics stay plain JSON objects (their producers may add keys), but the keys
the reports read are checked here once, so the report code can index them directly. Times
are seconds (``_s``), memory GiB (``_gib``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specs import serde
from specs.bundle import PlanBundle
from specs.errors import SpecError
from specs.timeline import Timeline

WRITERS: dict[str, str] = {
    "plan.json": "paraplan plan --out DIR",
    "estimate.json": "paraplan plan --out DIR (or paraplan execute PLAN.json --out RUN)",
    "predicted.json": "paraplan plan --out DIR (or paraplan execute PLAN.json --out RUN)",
    "metrics.json": "paraplan execute PLAN.json --out RUN",
    "measured.json": "paraplan execute PLAN.json --out RUN",
    "candidates.json": "paraplan plan --out DIR",
}
"""Which command writes each file of a run folder, for error messages."""

ESTIMATE_NUMBERS = ("iteration_time_s", "tokens_per_s", "mfu", "peak_memory_gib")
"""Estimate keys every report shows; each must be a number."""
METRICS_LISTS = ("iteration_time_s",)
"""Metrics keys the comparison needs; each must be a list of numbers."""


MEMORY_SOURCE_DEVICE: dict[str, str] = {
    "cuda_allocator": "gpu",
    "profiler_memory_events": "cpu",
}
"""``metrics.json``'s ``memory_source`` (`executor.run_folder.write_run`) by the kind of
device the run's ranks ran on (`profiles.schema.DeviceSpec.kind`)."""


def run_device_kind(metrics: dict[str, Any] | None) -> str | None:
    """``gpu`` or ``cpu``: where a run's ranks ran, read off ``metrics.json``'s
    ``memory_source``; None when the metrics do not say (a failed run, an older folder)."""
    return MEMORY_SOURCE_DEVICE.get(str((metrics or {}).get("memory_source")))


@dataclass(frozen=True, kw_only=True, slots=True)
class RunDir:
    """Everything a run folder holds, parsed."""

    path: Path
    """The run folder."""
    bundle: PlanBundle
    """Model, cluster, job and plan (``plan.json``)."""
    estimate: dict[str, Any]
    """Cost-model estimate (``estimate.json``), keys checked by `check_estimate`."""
    predicted: Timeline
    """Predicted timeline (``predicted.json``)."""
    measured: Timeline | None
    """Measured timeline (``measured.json``); None for a prediction-only folder."""
    metrics: dict[str, Any] | None
    """Executor metrics (``metrics.json``); None for a prediction-only folder."""
    candidates: dict[str, Any] | list[Any] | None
    """Top candidates of the search (``candidates.json``); None when absent."""


def load_run(path: str | Path, *, require_measured: bool = True) -> RunDir:
    """Read a run folder.

    A missing required file raises `SpecError` naming it and the command that writes it.
    With ``require_measured=False`` (the folder of ``paraplan plan --out``) the executor's
    files are optional too, but one of ``measured.json`` and ``metrics.json`` without the
    other is refused (`_check_measurement_pair`), except a failed run's ``metrics.json``.
    ``candidates.json`` is always optional.
    """
    root = Path(path)
    if not root.is_dir():
        state = "is not a folder" if root.exists() else "does not exist"
        raise SpecError(
            f"run folder {root} {state}; create one with "
            "`paraplan execute PLAN.json --out RUN` or `paraplan plan ... --out DIR`"
        )
    bundle = serde.load(PlanBundle, _require(root, "plan.json"))
    estimate = check_estimate(
        serde.read_json(_require(root, "estimate.json")), where="estimate.json"
    )
    predicted = _load_timeline(_require(root, "predicted.json"), "predicted")
    measured_path = _optional(root, "measured.json")
    metrics_path = _optional(root, "metrics.json")
    metrics = (
        check_metrics(serde.read_json(metrics_path), where=str(metrics_path))
        if metrics_path
        else None
    )
    _check_measurement_pair(root, measured_path, metrics)
    if require_measured and measured_path is None:
        raise SpecError(_no_measurement(root, metrics))
    candidates_path = _optional(root, "candidates.json")
    return RunDir(
        path=root,
        bundle=bundle,
        estimate=estimate,
        predicted=predicted,
        measured=_load_timeline(measured_path, "measured") if measured_path else None,
        metrics=metrics,
        candidates=serde.read_json(candidates_path) if candidates_path else None,
    )


def _no_measurement(root: Path, metrics: dict[str, Any] | None) -> str:
    """Why a run folder has no measured timeline to read: a failed (or interrupted) run,
    whose cause ``metrics.json`` names, or a missing ``measured.json``."""
    if metrics is None or metrics.get("status") != "failed":
        return (
            f"{root}: missing measured.json; it is written by `{WRITERS['measured.json']}` "
            "(run that command with this folder as its output)"
        )
    cause = (metrics.get("failure") or {}).get("cause", "cause not recorded")
    ran = len(metrics.get("iteration_time_s") or [])
    return (
        f"{root}: the run failed ({cause}; {ran} measured steps ran) and has no measured "
        "timeline; leave it out, or run the plan again to completion "
        f"(`{WRITERS['measured.json']}`)"
    )


def _check_measurement_pair(
    root: Path, measured_path: Path | None, metrics: dict[str, Any] | None
) -> None:
    """A run folder holds ``measured.json`` and ``metrics.json`` together (a completed
    run) or ``metrics.json`` alone with ``status`` ``failed``; anything else is a folder
    whose measurement was lost, and a `SpecError` naming the missing file."""
    if measured_path is None and metrics is not None and metrics.get("status") != "failed":
        missing = "measured.json"
    elif measured_path is not None and metrics is None:
        missing = "metrics.json"
    else:
        return
    raise SpecError(
        f"{root}: missing {missing} beside the run's other measurement file; it is written "
        f"by `{WRITERS[missing]}` (run it again with this folder as its output)"
    )


def check_estimate(data: Any, *, where: str = "estimate") -> dict[str, Any]:
    """Check the estimate keys the reports read; return the estimate unchanged."""
    if not isinstance(data, dict):
        raise SpecError(f"{where}: expected a JSON object, got {type(data).__name__}")
    for key in ESTIMATE_NUMBERS:
        _require_number(data, key, where)
    for key in ("memory", "breakdown"):
        if key in data and not isinstance(data[key], list if key == "memory" else dict):
            kind = "a list of stages" if key == "memory" else "an object of phase seconds"
            raise SpecError(f"{where}: {key!r} must be {kind}, got {data[key]!r:.80}")
    return data


def check_metrics(data: Any, *, where: str = "metrics") -> dict[str, Any]:
    """Check the metrics keys the reports read; return the metrics unchanged."""
    if not isinstance(data, dict):
        raise SpecError(f"{where}: expected a JSON object, got {type(data).__name__}")
    for key in METRICS_LISTS:
        _require_number_list(data, key, where)
    for key in ("loss", "peak_memory_gib"):
        if key in data:
            _require_number_list(data, key, where)
    if "collectives" in data and not isinstance(data["collectives"], list):
        raise SpecError(f"{where}: 'collectives' must be a list of {{op, group, bytes, count}}")
    return data


def _require(root: Path, name: str) -> Path:
    path = root / name
    if not path.is_file():
        raise SpecError(
            f"{root}: missing {name}; it is written by `{WRITERS[name]}` "
            f"(run that command with this folder as its output)"
        )
    return path


def _optional(root: Path, name: str) -> Path | None:
    path = root / name
    return path if path.is_file() else None


def _load_timeline(path: Path, source: str) -> Timeline:
    timeline = serde.load(Timeline, path)
    if timeline.source != source:
        raise SpecError(
            f"{path}: timeline source is {timeline.source!r} but this file must hold the "
            f"{source!r} timeline; check which command wrote it ({WRITERS[path.name]})"
        )
    return timeline


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _require_number(data: dict[str, Any], key: str, where: str) -> None:
    if key not in data:
        raise SpecError(f"{where}: missing key {key!r} (keys present: {', '.join(sorted(data))})")
    if not _is_number(data[key]):
        raise SpecError(f"{where}: {key!r} must be a number, got {data[key]!r:.80}")


def _require_number_list(data: dict[str, Any], key: str, where: str) -> None:
    if key not in data:
        raise SpecError(f"{where}: missing key {key!r} (keys present: {', '.join(sorted(data))})")
    value = data[key]
    if not isinstance(value, list) or not all(_is_number(v) for v in value):
        raise SpecError(f"{where}: {key!r} must be a list of numbers, got {value!r:.80}")
