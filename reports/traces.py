"""Chrome trace JSON of the predicted and the measured timeline, side by side in Perfetto.

Both files come from `specs.Timeline.to_chrome_trace`: one process per rank, one thread
per lane with the same lane names and thread ids (`specs.timeline.LANES`), times in
microseconds, so the two traces line up when opened one after the other (or together) in
Perfetto or chrome://tracing.
"""

from __future__ import annotations

import json
from pathlib import Path

from specs.errors import SpecError
from specs.timeline import Timeline

PREDICTED_TRACE = "predicted.trace.json"
"""File name of the predicted trace inside a run folder."""
MEASURED_TRACE = "measured.trace.json"
"""File name of the measured trace inside a run folder."""


def write_traces(
    run_dir: str | Path, predicted: Timeline, measured: Timeline | None = None
) -> tuple[Path, ...]:
    """Write ``predicted.trace.json`` (and ``measured.trace.json`` when given) into
    ``run_dir``; return the paths written. Raises `SpecError` when a timeline's source does
    not match its file or the folder cannot be written."""
    folder = Path(run_dir)
    pairs = [(predicted, "predicted", PREDICTED_TRACE)]
    if measured is not None:
        pairs.append((measured, "measured", MEASURED_TRACE))
    written = []
    for timeline, source, name in pairs:
        if timeline.source != source:
            raise SpecError(
                f"write_traces: the {source} argument holds a {timeline.source!r} timeline; "
                "pass the predicted timeline first and the measured one second"
            )
        path = folder / name
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(timeline.to_chrome_trace()) + "\n")
        except OSError as exc:
            raise SpecError(f"cannot write {path}: {exc.strerror or exc}") from exc
        written.append(path)
    return tuple(written)
