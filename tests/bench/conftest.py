"""Fixtures of the fidelity benchmark's tests: its files loaded as the script loads them."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _bench_modules() -> tuple[ModuleType, ...]:
    """bench/fidelity.py and its sibling files, imported as the interpreter running the
    script imports them (bench/ first on the path)."""
    sys.path.insert(0, str(BENCH))
    try:
        return tuple(
            importlib.import_module(name)
            for name in (
                "fidelity_suite",
                "fidelity_rounds",
                "fidelity_pick",
                "fidelity_profiles",
                "fidelity_calibration",
                "fidelity",
            )
        )
    finally:
        sys.path.remove(str(BENCH))


@pytest.fixture(scope="module")
def suite() -> ModuleType:
    return _bench_modules()[0]


@pytest.fixture(scope="module")
def bench() -> SimpleNamespace:
    """Every name of the four files (the script's own last)."""
    names: dict[str, object] = {}
    for module in _bench_modules():
        names |= vars(module)
    return SimpleNamespace(**names)
