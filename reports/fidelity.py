"""Fidelity figures: how well predictions match measurements over a suite of executed plans.

The fidelity benchmark (`bench/fidelity.py`) executes plans on the machine at hand and
records, per plan, the predicted and the measured iteration time and peak memory as a
`FidelityRow`; `summarize` turns the rows into the benchmark's figures, `row_to_json` and
`summary_to_json` into its JSON, and `row_cells` / `summary_text` into its tables.

Conventions:

- Errors are signed and relative, ``(predicted - measured) / measured``, as in
  `reports.compare`; the summary uses their absolute values.
- A row without a prediction (the cost model refused the plan) counts in ``num_plans`` but
  not in any error figure, Kendall tau or ``num_predicted``.
- ``p90`` is numpy's linearly interpolated 90th percentile of the absolute errors.
- Kendall tau is scipy's tau-b between the predicted and the measured iteration times of
  the predicted rows: 1 when the cost model orders the plans exactly as the machine does.
- The pick rule: the planner's pick is within `PICK_TOLERANCE` of the best when its
  measured iteration time is at most ``(1 + PICK_TOLERANCE)`` times the fastest measured
  plan of its group (same model, world size and job).
- Host speed: on a shared host the machine's own speed drifts; each run can time a fixed
  host probe (`profiles.host_probe`), and `reports.host_speed` chooses each plan's run at
  one host speed and predicts it at that run's speed: the measured times stay as measured.
- Repeated runs: a plan runs several times, round by round over the whole suite, and its
  measured time is its `median_run`: the run whose median step is the middle one. A
  shared virtual machine has fast spells as well as slow ones (one plan's runs differ by
  up to a third), so the middle run describes the host's usual state, and the calibration
  runs are read the same way. The row keeps how many runs it took and their
  `repeat_spread` (median absolute deviation over the median), and the summary the median
  spread: the run-to-run noise of the machine, below which no prediction error can be
  told apart.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import kendalltau

from reports.compare import relative_error
from specs.errors import SpecError

PICK_TOLERANCE = 0.05
"""Slack of the pick rule: the pick may be this fraction slower than the best measured."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FidelityRow:
    """One executed plan: what the cost model predicted and what the machine measured."""

    name: str
    """Short unique name of the plan in the suite, e.g. ``dp2-overlap``."""
    group: str
    """Model, world size and job the plan belongs to; the pick rule compares within one."""
    plan: str
    """The plan's label (`specs.plan.ParallelPlan.label`)."""
    covers: tuple[str, ...]
    """Features the plan exercises (``tp``, ``sp``, ``pp-1f1b``, ...)."""
    world_size: int
    """Ranks of the run."""
    measured_time_s: float
    """Median iteration time of the timed steps, seconds."""
    predicted_time_s: float | None
    """Predicted iteration time, seconds; None when the cost model refused the plan."""
    measured_memory_gib: float
    """Peak memory of the fullest rank, GiB."""
    predicted_memory_gib: float | None
    """Predicted peak memory of the fullest stage, GiB; None without a prediction."""
    note: str = ""
    """Why a prediction is missing, or how the plan entered the suite."""
    runs: int = 1
    """Executed runs of the plan; ``measured_time_s`` is their `median_run`'s median."""
    repeat_spread: float | None = None
    """`repeat_spread` of the runs' medians; None with a single run."""
    host_probe_s: float | None = None
    """The host probe of the run ``measured_time_s`` comes from (`profiles.host_probe`);
    None when the run did not probe."""

    @property
    def time_error(self) -> float | None:
        """Signed relative error of the iteration time; None without a prediction."""
        if self.predicted_time_s is None:
            return None
        return relative_error(self.predicted_time_s, self.measured_time_s)

    @property
    def memory_error(self) -> float | None:
        """Signed relative error of the peak memory; None without a prediction."""
        if self.predicted_memory_gib is None:
            return None
        return relative_error(self.predicted_memory_gib, self.measured_memory_gib)


@dataclass(frozen=True, kw_only=True, slots=True)
class FidelitySummary:
    """The benchmark's figures over a set of rows."""

    num_plans: int
    """Rows summarized."""
    num_predicted: int
    """Rows with a prediction (the error figures and tau use only these)."""
    median_abs_error: float | None
    """Median absolute relative iteration-time error; None without predicted rows."""
    p90_abs_error: float | None
    """90th percentile of the absolute relative iteration-time error."""
    memory_median_abs_error: float | None
    """Median absolute relative peak-memory error."""
    kendall_tau: float | None
    """Kendall tau-b between predicted and measured iteration times; None under 2 rows or
    when either side has a single distinct value."""
    pick_within_5pct: bool | None
    """Pick rule (module docstring); None when there is no pick."""
    median_repeat_spread: float | None = None
    """Median over the rows run more than once of their `FidelityRow.repeat_spread`."""


def median_run(medians_s: Sequence[float]) -> int:
    """Index of the middle run by its median step (the lower middle of an even count), the
    run a plan's measured time comes from. Raises `SpecError` without runs."""
    if not medians_s:
        raise SpecError("a plan without a single run has no median run; execute it first")
    order = sorted(range(len(medians_s)), key=lambda i: medians_s[i])
    return order[(len(order) - 1) // 2]


def repeat_spread(medians_s: Sequence[float]) -> float | None:
    """Run-to-run noise of a plan: the median absolute deviation of its runs' medians over
    their median (a fraction); None under two runs."""
    if len(medians_s) < 2:
        return None
    middle = float(np.median(medians_s))
    return float(np.median([abs(m - middle) for m in medians_s])) / middle


def _present(values: Iterable[float | None]) -> list[float]:
    return [abs(v) for v in values if v is not None and math.isfinite(v)]


def median_abs(errors: Iterable[float | None]) -> float | None:
    """Median of the absolute values of the errors that exist; None when none does."""
    kept = _present(errors)
    return float(np.median(kept)) if kept else None


def percentile_abs(errors: Iterable[float | None], q: float) -> float | None:
    """``q``-th percentile (0-100, linear interpolation) of the absolute errors that exist."""
    if not 0 <= q <= 100:
        raise SpecError(f"percentile q must be in [0, 100], got {q}; e.g. 90 for p90")
    kept = _present(errors)
    return float(np.percentile(kept, q)) if kept else None


def kendall_tau(predicted: Sequence[float], measured: Sequence[float]) -> float | None:
    """Kendall tau-b between two equally long sequences; None when it is undefined."""
    if len(predicted) != len(measured):
        raise SpecError(
            f"kendall_tau needs sequences of one length, got {len(predicted)} predicted and "
            f"{len(measured)} measured values; pass one value per plan on each side"
        )
    if len(predicted) < 2:
        return None
    tau = kendalltau(predicted, measured).statistic
    return None if tau is None or math.isnan(tau) else float(tau)


def pick_within(
    pick_measured_s: float, group_measured_s: Iterable[float], tolerance: float = PICK_TOLERANCE
) -> bool:
    """True when the pick's measured time is at most (1 + tolerance) x the group's best."""
    best = min([pick_measured_s, *group_measured_s])
    return pick_measured_s <= (1 + tolerance) * best


def summarize(rows: Sequence[FidelityRow], pick: str | None = None) -> FidelitySummary:
    """The figures of ``rows``; ``pick`` is the name of the row the planner picked (it must
    be one of the rows), compared with the other rows of its group."""
    predicted = [r for r in rows if r.predicted_time_s is not None]
    within = None
    if pick is not None:
        chosen = [r for r in rows if r.name == pick]
        if not chosen:
            raise SpecError(
                f"the pick {pick!r} is not one of the rows ({', '.join(r.name for r in rows)}); "
                "execute the planner's pick and add its row before summarizing"
            )
        group = [r.measured_time_s for r in rows if r.group == chosen[0].group]
        within = pick_within(chosen[0].measured_time_s, group)
    return FidelitySummary(
        num_plans=len(rows),
        num_predicted=len(predicted),
        median_abs_error=median_abs(r.time_error for r in predicted),
        p90_abs_error=percentile_abs((r.time_error for r in predicted), 90),
        memory_median_abs_error=median_abs(r.memory_error for r in predicted),
        kendall_tau=kendall_tau(
            [r.predicted_time_s for r in predicted],  # type: ignore[misc]
            [r.measured_time_s for r in predicted],
        ),
        pick_within_5pct=within,
        median_repeat_spread=median_abs(r.repeat_spread for r in rows),
    )


def row_to_json(row: FidelityRow) -> dict[str, Any]:
    """A row with its errors, JSON-ready (times in seconds, memory in GiB)."""
    return {
        "name": row.name,
        "group": row.group,
        "plan": row.plan,
        "covers": list(row.covers),
        "world_size": row.world_size,
        "predicted_iteration_time_s": row.predicted_time_s,
        "measured_iteration_time_s": row.measured_time_s,
        "iteration_time_error": row.time_error,
        "predicted_peak_memory_gib": row.predicted_memory_gib,
        "measured_peak_memory_gib": row.measured_memory_gib,
        "memory_error": row.memory_error,
        "runs": row.runs,
        "repeat_spread": row.repeat_spread,
        "host_probe_s": row.host_probe_s,
        "note": row.note,
    }


def summary_to_json(summary: FidelitySummary) -> dict[str, Any]:
    """The summary's figures under the benchmark's key names."""
    return {
        "median_abs_error": summary.median_abs_error,
        "p90_abs_error": summary.p90_abs_error,
        "memory_median_abs_error": summary.memory_median_abs_error,
        "kendall_tau": summary.kendall_tau,
        "pick_within_5pct": summary.pick_within_5pct,
        "num_plans": summary.num_plans,
        "num_predicted": summary.num_predicted,
        "median_repeat_spread": summary.median_repeat_spread,
    }


# ---- text ----------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.1%}"


def _num(value: float | None, scale: float, fmt: str) -> str:
    return "n/a" if value is None else format(value * scale, fmt)


def row_cells(row: dict[str, Any]) -> list[str]:
    """Table cells of a row of `row_to_json` under `COLUMNS`: times in ms, memory in MiB,
    signed errors."""
    return [
        row["name"],
        row["plan"],
        _num(row["predicted_iteration_time_s"], 1e3, ".1f"),
        _num(row["measured_iteration_time_s"], 1e3, ".1f"),
        _pct(row["iteration_time_error"]),
        _num(row["predicted_peak_memory_gib"], 1024, ".1f"),
        _num(row["measured_peak_memory_gib"], 1024, ".1f"),
        _pct(row["memory_error"]),
        _runs(row.get("runs", 1), row.get("repeat_spread")),
    ]


def _runs(runs: int, spread: float | None) -> str:
    return str(runs) if spread is None else f"{runs} (±{spread * 100:.1f}%)"


COLUMNS = (
    "plan",
    "knobs",
    "pred ms",
    "meas ms",
    "time err",
    "pred MiB",
    "meas MiB",
    "mem err",
    "runs (spread)",
)
"""Column titles of `row_cells`."""


def summary_text(summary: dict[str, Any]) -> str:
    """The figures of `summary_to_json` on one line (errors in percent)."""
    tau = summary["kendall_tau"]
    pick = summary["pick_within_5pct"]
    spread = summary.get("median_repeat_spread")
    noise = "" if spread is None else f"; median run-to-run spread {spread:.1%}"
    return (
        f"median |time error| {_num(summary['median_abs_error'], 100, '.1f')}%, "
        f"p90 {_num(summary['p90_abs_error'], 100, '.1f')}%, "
        f"median |memory error| {_num(summary['memory_median_abs_error'], 100, '.1f')}%, "
        f"Kendall tau {'n/a' if tau is None else f'{tau:.2f}'}, "
        f"pick within 5%: {'n/a' if pick is None else ('yes' if pick else 'no')} "
        f"({summary['num_predicted']}/{summary['num_plans']} plans predicted){noise}"
    )
