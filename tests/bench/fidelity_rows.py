"""A hand-made row of the fidelity benchmark (`reports.fidelity.FidelityRow`), shared by the
tests of `reports.fidelity` and of bench/fidelity*.py."""

from __future__ import annotations

from reports.fidelity import FidelityRow


def row(name: str, measured: float, predicted: float | None, group: str = "g") -> FidelityRow:
    """A row of plan ``name`` on 2 ranks: ``measured`` and ``predicted`` iteration times (s),
    1 GiB measured and, when predicted, 1 GiB plus the time difference (in GiB) predicted."""
    return FidelityRow(
        name=name,
        group=group,
        plan=name,
        covers=(),
        world_size=2,
        measured_time_s=measured,
        predicted_time_s=predicted,
        measured_memory_gib=1.0,
        predicted_memory_gib=None if predicted is None else 1.0 + (predicted - measured),
    )
