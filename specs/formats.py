"""How figures are written for people, in one place for every room.

MFU, HFU and other shares are fractions (0 to 1) in every JSON file and JSON output, and
percentages with one decimal in tables and text (`percent`). Memory sizes are bytes in JSON
(or GiB in keys ending ``_gib``) and GiB with three significant digits in text (`gib`).
"""

from __future__ import annotations


def percent(fraction: float) -> str:
    """A fraction (MFU, HFU, a share of the iteration) as tables and text show it:
    ``0.4123`` -> ``"41.2%"``."""
    return f"{fraction:.1%}"


BF16_PEAK_DTYPES = ("bf16", "fp16")
"""GEMM dtypes whose dense peak is the bf16 one (the same tensor-core rate on every stored
profile): an MFU over either is already over the bf16 peak."""


def mfu_text(mfu: float, peak_dtype: str, mfu_bf16: float | None) -> str:
    """MFU as tables and text show it: ``41.2%`` over a bf16 (or fp16) peak; for another
    GEMM dtype both figures, labelled: ``31.2% of the fp8 peak, 62.4% of the bf16 peak``
    (the second is the convention of torchtitan's and Megatron-Bridge's published MFU);
    ``31.2% of the fp8 peak`` alone when the profile has no bf16 peak (``mfu_bf16`` None)."""
    if peak_dtype in BF16_PEAK_DTYPES:
        return percent(mfu)
    text = f"{percent(mfu)} of the {peak_dtype} peak"
    return text if mfu_bf16 is None else f"{text}, {percent(mfu_bf16)} of the bf16 peak"


GIB_BYTES = 2**30
"""Bytes in one GiB."""


def gib(value_bytes: float, *, signed: bool = False) -> str:
    """A memory size in text: GiB with one decimal from 10 GiB up, three significant digits
    below (``0.0237 GiB`` for a small model, not ``0.0 GiB``); ``signed`` prefixes + or -."""
    value = value_bytes / GIB_BYTES
    sign = "+" if signed else ""
    spec = f"{sign}.1f" if abs(value) >= 10 else f"{sign}.3g"
    return f"{value:{spec}} GiB"


ROUNDING_FRACTION = 1e-9
"""Share of the iteration time below which a phase's seconds are floating-point rounding
of the schedule's sums and differences (a bubble of 1e-14 s), shown as 0."""


def shown_seconds(seconds: float, iteration_s: float) -> float:
    """``seconds`` as tables and text show a phase of an ``iteration_s`` iteration: 0.0 when
    within `ROUNDING_FRACTION` of the iteration time, else unchanged (JSON keeps the value)."""
    return 0.0 if abs(seconds) <= ROUNDING_FRACTION * iteration_s else seconds
