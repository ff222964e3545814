"""The provenance section of a `profiles.schema.HardwareProfile`: whether its numbers were
derived from published sources, measured or calibrated, with what, and the spread of every
measurement (`MeasurementSpread`, a record that no cost model reads)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from specs.errors import SpecError
from specs.fieldcheck import require_choice, require_positive

ProvenanceMethod = Literal["derived", "measured", "calibrated"]


@dataclass(frozen=True, kw_only=True, slots=True)
class MeasurementSpread:
    """Spread of repeated timings behind one measured figure: a record of the measurement
    in the provenance, which no cost model reads (the host costs they fed are the typed
    `HostOverheads` section)."""

    quantity: str
    """What was measured, e.g. ``gemm.bf16.4096x4096x4096`` or ``all_reduce.intra.8``."""
    unit: str
    """Unit of the statistics below, e.g. ``s`` or ``TFLOP/s``."""
    num_samples: int
    """Timed repetitions."""
    mean: float
    """Mean of the samples."""
    stdev: float
    """Sample standard deviation."""
    min: float
    """Smallest sample."""
    max: float
    """Largest sample."""
    median: float | None = None
    """Median of the samples (None in profiles written before it was recorded)."""

    def __post_init__(self) -> None:
        require_positive(self, "num_samples")
        if self.stdev < 0 or not self.min <= self.mean <= self.max:
            raise SpecError(
                f"MeasurementSpread {self.quantity!r}: need stdev >= 0 and min <= mean <= max, "
                f"got stdev={self.stdev}, min={self.min}, mean={self.mean}, max={self.max}"
            )
        if self.median is not None and not self.min <= self.median <= self.max:
            raise SpecError(
                f"MeasurementSpread {self.quantity!r}: need min <= median <= max, got "
                f"min={self.min}, median={self.median}, max={self.max}"
            )

    def host_stats(self) -> dict[str, Any]:
        """The statistics a host-section row (`HostTiming`, `HostStream`, `HostCollective`)
        carries, keyed by its field names: sample count and mean, median, min and max in
        seconds (the spread's unit for host timings)."""
        return {
            "num_samples": self.num_samples,
            "mean_s": self.mean,
            "median_s": self.median,
            "min_s": self.min,
            "max_s": self.max,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class Provenance:
    """Where the numbers came from."""

    method: ProvenanceMethod
    """`derived` from published sources, `measured` on a machine, or `calibrated` from
    predicted-vs-measured residuals."""
    sources: tuple[str, ...] = ()
    """Published sources (derived) or the profiles a calibration started from."""
    date: str
    """ISO date (YYYY-MM-DD) the profile was made."""
    command: str
    """Command that produced the file, e.g. ``python -m profiles.derive --write``."""
    tool_version: str | None = None
    """paraplan version that wrote a measured profile."""
    torch_version: str | None = None
    """torch version used for measurements."""
    collective_library_version: str | None = None
    """NCCL/RCCL version (or gloo) used for the collective sweep."""
    driver_version: str | None = None
    """GPU driver version of the measured machine."""
    host: str | None = None
    """Host name or machine description of the measured machine."""
    notes: tuple[str, ...] = ()
    """Free-text notes: assumptions, conflicts between sources, caveats."""
    spread: tuple[MeasurementSpread, ...] = ()
    """Per-measurement spread of a measured profile (a record, not a model input)."""

    def __post_init__(self) -> None:
        require_choice(self, "method", ProvenanceMethod)
        if self.method == "derived" and not self.sources:
            raise SpecError("Provenance: a derived profile must list its sources")
        if len(self.date) != 10 or self.date[4] != "-" or self.date[7] != "-":
            raise SpecError(f"Provenance.date must be an ISO date YYYY-MM-DD, got {self.date!r}")
