"""Vocabulary and field checks shared by the sections of a `profiles.schema.HardwareProfile`:
the dtype keys every curve and peak is keyed by, and the range checks of float fields with
the message each raises."""

from __future__ import annotations

from specs.errors import SpecError

DTYPES: tuple[str, ...] = ("bf16", "fp16", "fp8", "fp4", "fp32")
"""Valid dtype keys of `peak_tflops`, `gemm_efficiency` and attention curves; ``fp4`` is
NVFP4 (E2M1 values with FP8 E4M3 block scales), on Blackwell-class devices only."""

ATTENTION_DTYPES: tuple[str, ...] = (*DTYPES, "mxfp8")
"""Valid dtypes of attention curves: `DTYPES` and ``mxfp8``, cuDNN's block-scaled FP8
attention kernel (E4M3 with one E8M0 scale per 32 elements), which Transformer Engine's
MXFP8 recipe runs; ``fp8`` is the per-tensor scaled one."""

PEAK_DTYPE: dict[str, str] = {"mxfp8": "fp8"}
"""The `peak_tflops` key a curve dtype other than its own name needs: MXFP8 runs on the
FP8 tensor cores (E4M3 operands, block scales applied in the MMA), at the FP8 peak."""


def require_fraction(owner: str, name: str, value: float) -> None:
    """`SpecError` unless ``value`` (field ``owner.name``) is in (0, 1]."""
    if not 0.0 < value <= 1.0:
        raise SpecError(f"{owner}.{name} must be in (0, 1], got {value!r}")


def require_positive_float(owner: str, name: str, value: float) -> None:
    """`SpecError` unless ``value`` (field ``owner.name``) is > 0."""
    if not value > 0.0:
        raise SpecError(f"{owner}.{name} must be > 0, got {value!r}")


def require_dtype(owner: str, dtype: str, valid: tuple[str, ...] = DTYPES) -> None:
    """`SpecError` unless ``dtype`` is one of ``valid`` (`DTYPES` unless told)."""
    if dtype not in valid:
        raise SpecError(
            f"{owner}: unknown dtype {dtype!r}; valid dtypes: {', '.join(valid)}; "
            "store TF32 or other formats under the dtype the framework reports"
        )
