"""How figures are written for people, in one place for every room.

MFU, HFU and other shares are fractions (0 to 1) in every JSON file and JSON output, and
percentages with one decimal in tables and text (`percent`).
"""

from __future__ import annotations


def percent(fraction: float) -> str:
    """A fraction (MFU, HFU, a share of the iteration) as tables and text show it:
    ``0.4123`` -> ``"41.2%"``."""
    return f"{fraction:.1%}"
