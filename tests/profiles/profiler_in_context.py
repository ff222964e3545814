"""Checks shared by the tests of the in-context probes (`profiles.profiler.in_context`)."""

from __future__ import annotations

import statistics
from collections.abc import Callable

from profiles.profiler import in_context


def check_records(
    found: dict[str, tuple[float, ...]],
    extra: str,
    layer: str,
    center: Callable[[list[float]], float] = sum,
) -> None:
    """One rank's records of a probe at two levels: every record, its samples, host work
    only in the base (more at the worked level), a positive ``center`` of each pass's
    differences (a mechanism costs time; `statistics.median` for one of a fraction of a
    block, whose mean a preempted base can turn negative on a loaded host)."""
    names = {
        f"{kind}_{p}_w{level}"
        for kind in (extra, layer)
        for p in in_context.PASSES
        for level in (0, 1)
    }
    assert set(found) == names
    per_record = in_context.PAIRS // in_context.PAIRS_PER_SAMPLE
    # (the rounds the hypervisor stole CPU time in are left out)
    assert all(1 <= len(v) <= per_record for v in found.values())
    for p in in_context.PASSES:
        idle, worked = found[f"{layer}_{p}_w0"], found[f"{layer}_{p}_w1"]
        assert all(0 < t < 0.5 for t in idle + worked)
        # medians: one preempted sample of a loaded host must not decide it
        assert statistics.median(worked) > 2 * statistics.median(idle)
        # the mechanism costs time: its differences sit above zero
        extras = found[f"{extra}_{p}_w0"] + found[f"{extra}_{p}_w1"]
        assert center(list(extras)) > 0 and all(abs(t) < 0.5 for t in extras)
