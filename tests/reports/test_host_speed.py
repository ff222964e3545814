"""`reports.host_speed`: the host's drift read by its probe, on hand-made runs and rows."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from reports.calibrate import measured_iteration_s
from reports.fidelity import FidelityRow
from reports.host_speed import (
    at_host_speed,
    host_elasticity,
    host_typical,
    measured_at_reference,
    runs_at_one_host_speed,
)
from reports.run_dir import RunDir
from specs.errors import SpecError


def row(name: str, measured: float, predicted: float | None, probe_s: float | None, world: int = 2):
    return FidelityRow(
        name=name, group="g", plan=name, covers=(), world_size=world, measured_time_s=measured,
        predicted_time_s=predicted, measured_memory_gib=1.0, predicted_memory_gib=1.0,
        host_probe_s=probe_s,
    )  # fmt: skip


def test_predictions_at_each_runs_host_speed() -> None:
    fast, slow = row("fast", 1.0, 0.8, 1e-3), row("slow", 1.5, 0.8, 1.5e-3)
    refused, one_rank = row("refused", 1.0, None, 2e-3), row("w1", 1.0, 0.8, 1e-3, world=1)
    out = at_host_speed([fast, slow, refused, one_rank], {2: 1e-3, 1: 0.5e-3})
    # the same prediction, at a host 1.5x slower during the second run; one rank probes
    # alone, twice as fast as two at once at the same host speed
    assert [r.predicted_time_s for r in out] == pytest.approx([0.8, 1.2, None, 1.6])
    assert [r.measured_time_s for r in out] == [1.0, 1.5, 1.0, 1.0]  # measurements untouched
    assert out[1].time_error == pytest.approx(-0.2)
    half = at_host_speed([slow, one_rank], {2: 1e-3, 1: 0.5e-3}, elasticity=0.5)
    assert [r.predicted_time_s for r in half] == pytest.approx([0.8 * 1.5**0.5, 0.8 * 2**0.5])
    with pytest.raises(SpecError, match="runs without a host probe: a"):
        at_host_speed([row("a", 1.0, 1.0, None)], {2: 1e-3})
    with pytest.raises(SpecError, match=r"no positive reference probe for world sizes \[1\]"):
        at_host_speed([fast, one_rank], {2: 1e-3, 1: 0.0})


def test_elasticity_is_the_within_plan_slope() -> None:
    # two plans of different cost, each time = cost x probe^0.7: one slope, whatever the cost
    runs = {
        name: [(cost * p**0.7, p) for p in (0.4e-3, 0.6e-3, 0.9e-3)]
        for name, cost in (("a", 3.0), ("b", 50.0))
    }
    assert host_elasticity(runs) == pytest.approx(0.7)
    # a plan run once adds nothing; probes that never vary give no slope
    assert host_elasticity({**runs, "once": [(9.0, 1e-3)]}) == pytest.approx(0.7)
    with pytest.raises(SpecError, match="did not vary within any plan"):
        host_elasticity({"a": [(1.0, 1e-3), (1.1, 1e-3)], "b": [(2.0, 5e-4)]})
    with pytest.raises(SpecError, match=r"outside \[0.0, 2.0\]"):
        host_elasticity({"a": [(1.0, 1e-3), (0.5, 2e-3)]})  # faster as the host slows
    with pytest.raises(SpecError, match="plan a has runs without a positive time"):
        host_elasticity({"a": [(1.0, 0.0), (1.0, 1e-3)]})


def test_measurements_at_the_reference_speed_undo_each_runs_spell() -> None:
    fast, slow = row("fast", 1.0, 0.8, 0.5e-3), row("slow", 1.5, 0.8, 1.5e-3)
    one_rank = row("w1", 1.0, 0.8, 1e-3, world=1)
    out = measured_at_reference([fast, slow, one_rank], {2: 1e-3, 1: 0.5e-3})
    # a run in a 2x fast spell took half the time the plan takes at the reference speed
    assert [r.measured_time_s for r in out] == pytest.approx([2.0, 1.0, 0.5])
    assert [r.predicted_time_s for r in out] == [0.8, 0.8, 0.8]  # predictions untouched
    root = measured_at_reference([fast], {2: 1e-3}, elasticity=0.5)
    assert root[0].measured_time_s == pytest.approx(2**0.5)
    # moving the prediction to the run or the run to the reference: the same error
    there = at_host_speed([slow], {2: 1e-3})[0]
    back = measured_at_reference([slow], {2: 1e-3})[0]
    assert there.time_error == pytest.approx(back.time_error)
    with pytest.raises(SpecError, match="runs without a host probe: a"):
        measured_at_reference([row("a", 1.0, 1.0, None)], {2: 1e-3})


def test_the_typical_run_is_the_middle_one_at_one_host_speed() -> None:
    # by time the middle run is the 0.3 s one; brought to one speed (elasticity 1) the runs
    # cost 300, 150 and 200: the middle is the 0.2 s run
    seconds, probes = [0.3, 0.6, 0.2], [1e-3, 4e-3, 1e-3]
    assert host_typical(seconds, probes, 1.0) == 2
    assert host_typical(seconds, probes, 0.0) == 0  # elasticity 0: by time (0.2 0.3 0.6)
    with pytest.raises(SpecError, match="one probe per run"):
        host_typical(seconds, probes[:2], 1.0)
    with pytest.raises(SpecError, match="positive host probes"):
        host_typical(seconds, [1e-3, 0.0, 1e-3], 1.0)


@given(
    slope=st.floats(0.05, 1.9),
    costs=st.lists(st.floats(0.01, 10.0), min_size=1, max_size=4),
    probes=st.lists(st.floats(1e-4, 1e-2), min_size=2, max_size=5, unique=True),
)
def test_elasticity_recovers_any_exact_power_law(
    slope: float, costs: list[float], probes: list[float]
) -> None:
    assume(max(probes) / min(probes) > 1.01)  # enough drift to fit a slope to 1e-6
    runs = {f"p{i}": [(c * p**slope, p) for p in probes] for i, c in enumerate(costs)}
    assert host_elasticity(runs) == pytest.approx(slope, abs=1e-6)
    # and at that slope every run of a plan costs the same: the middle index is a valid run
    index = host_typical([t for t, _ in runs["p0"]], probes, slope)
    assert 0 <= index < len(probes)
    assert math.isfinite(runs["p0"][index][0])


def _run(path: str, steps: list[float], probe_s: float | None) -> RunDir:
    metrics = {"iteration_time_s": steps, "timed_steps": list(range(len(steps)))}
    if probe_s is not None:
        metrics["host_probe_p50_s"] = probe_s
    return RunDir(
        path=Path(path), bundle=None, estimate={}, predicted=None, measured=None,  # type: ignore[arg-type]
        metrics=metrics, candidates=None,
    )  # fmt: skip


def test_runs_are_brought_to_their_mean_host_speed_before_a_fit() -> None:
    fast, slow = _run("fast", [0.05, 0.06], 0.5e-3), _run("slow", [0.2, 0.2], 2e-3)
    out = runs_at_one_host_speed([fast, slow], elasticity=1.0)
    # geometric mean of the probes: 1 ms; the fast run took half, the slow one twice that
    assert [measured_iteration_s(r) for r in out] == pytest.approx([0.11, 0.1])
    assert [r.metrics["host_probe_p50_s"] for r in out] == pytest.approx([1e-3, 1e-3])
    assert fast.metrics["iteration_time_s"] == [0.05, 0.06]  # the loaded runs untouched
    held = runs_at_one_host_speed([_run("h", [0.3], 3e-3)], 0.5, reference_s=1e-3)
    assert measured_iteration_s(held[0]) == pytest.approx(0.3 / 3**0.5)
    assert runs_at_one_host_speed([], 1.0) == []
    with pytest.raises(SpecError, match="runs without a host probe: bare"):
        runs_at_one_host_speed([fast, _run("bare", [0.1], None)], 1.0)
    with pytest.raises(SpecError, match=r"elasticity 3.0 is outside \[0.0, 2.0\]"):
        runs_at_one_host_speed([fast], 3.0)
