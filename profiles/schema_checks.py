"""Vocabulary and field checks shared by the sections of a `profiles.schema.HardwareProfile`:
the dtype keys every curve and peak is keyed by, and the range checks of float fields with
the message each raises."""

from __future__ import annotations

from specs.errors import SpecError

DTYPES: tuple[str, ...] = ("bf16", "fp16", "fp8", "fp4", "fp32")
"""Valid dtype keys of `peak_tflops`, `gemm_efficiency` and attention curves; ``fp4`` is
NVFP4 (E2M1 values with FP8 E4M3 block scales), on Blackwell-class devices only."""


def require_fraction(owner: str, name: str, value: float) -> None:
    """`SpecError` unless ``value`` (field ``owner.name``) is in (0, 1]."""
    if not 0.0 < value <= 1.0:
        raise SpecError(f"{owner}.{name} must be in (0, 1], got {value!r}")


def require_positive_float(owner: str, name: str, value: float) -> None:
    """`SpecError` unless ``value`` (field ``owner.name``) is > 0."""
    if not value > 0.0:
        raise SpecError(f"{owner}.{name} must be > 0, got {value!r}")


def require_dtype(owner: str, dtype: str) -> None:
    """`SpecError` unless ``dtype`` is one of `DTYPES`."""
    if dtype not in DTYPES:
        raise SpecError(
            f"{owner}: unknown dtype {dtype!r}; valid dtypes: {', '.join(DTYPES)}; "
            "store TF32 or other formats under the dtype the framework reports"
        )
