"""One format for MFU and HFU: `specs.formats.percent` (one decimal) in tables and text,
fractions in JSON; no other code formats them by hand. Memory sizes in text: `gib`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from specs.formats import GIB_BYTES, gib, mfu_text, percent, shown_seconds

ROOT = Path(__file__).resolve().parents[2]
PRINTING_ROOMS = ("paraplan", "planner", "reports", "costmodel", "executor", "profiles", "bench")


def test_percent_has_one_decimal() -> None:
    assert percent(0.4123) == "41.2%"
    assert percent(1.0) == "100.0%"
    assert percent(0.00049) == "0.0%"


def test_gib_keeps_small_sizes_visible() -> None:
    # a tiny model's peak once printed as "0.0 GiB"
    assert gib(0.02372 * GIB_BYTES) == "0.0237 GiB"
    assert gib(5.234 * GIB_BYTES) == "5.23 GiB"
    assert gib(53.64 * GIB_BYTES) == "53.6 GiB"
    assert gib(-0.3 * GIB_BYTES, signed=True) == "-0.3 GiB"
    assert gib(12.0 * GIB_BYTES, signed=True) == "+12.0 GiB"


def hand_formatted_mfu(source: str, filename: str) -> list[int]:
    """Lines where an MFU or HFU value gets a format spec of its own: ``f"{mfu:.1%}"``,
    ``"{:.1%}".format`` beside an MFU, ``f"{100 * mfu:.3g}%"``."""
    found = []
    tree = ast.parse(source, filename=filename)
    for node in ast.walk(tree):
        if isinstance(node, ast.FormattedValue) and node.format_spec is not None:
            if any(k in ast.unparse(node.value).lower() for k in ("mfu", "hfu")):
                found.append(node.lineno)
        elif isinstance(node, ast.Call) and any(
            k in ast.unparse(node).lower() for k in ("mfu", "hfu")
        ):
            for inner in ast.walk(node):
                constant = getattr(inner, "value", None)
                is_format = isinstance(inner, ast.Attribute) and inner.attr == "format"
                if is_format and isinstance(constant, ast.Constant) and "%}" in str(constant.value):
                    found.append(node.lineno)
    return sorted(set(found))


def test_no_mfu_is_formatted_by_hand() -> None:
    bad = []
    for room in PRINTING_ROOMS:
        for path in sorted((ROOT / room).rglob("*.py")):
            lines = hand_formatted_mfu(path.read_text(), str(path))
            bad += [f"{path.relative_to(ROOT)}:{n}" for n in lines]
    assert not bad, "MFU/HFU formatted without specs.formats.percent:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    "source",
    [
        'x = f"MFU {est.mfu:.1%}"',
        'x = f"MFU {100 * s.mfu:.3g}%"',
        'row = ("MFU", optional(mfu_m, "{:.1%}".format))',
    ],
)
def test_the_scan_sees_a_hand_format(source: str) -> None:
    assert hand_formatted_mfu(source, "case.py") == [1]


def test_shown_seconds_drops_rounding_residues_only() -> None:
    assert shown_seconds(8.88e-15, 15.9) == 0.0
    assert shown_seconds(-3e-15, 15.9) == 0.0
    assert shown_seconds(0.0288, 15.9) == 0.0288


def test_mfu_text_labels_both_peaks_for_a_dtype_other_than_bf16() -> None:
    assert mfu_text(0.4123, "bf16", 0.4123) == "41.2%"
    assert mfu_text(0.4123, "fp16", 0.4123) == "41.2%"
    assert mfu_text(0.312, "fp8", 0.624) == "31.2% of the fp8 peak, 62.4% of the bf16 peak"
    assert mfu_text(0.2, "fp4", 0.8) == "20.0% of the fp4 peak, 80.0% of the bf16 peak"
    assert mfu_text(0.312, "fp8", None) == "31.2% of the fp8 peak"
