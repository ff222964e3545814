"""The cost model reproduces its golden predictions (`tests.costmodel.golden`) to 1e-9
relative: a restructuring of the model changes no number. The fixture was written by
``python -m tests.costmodel.golden``; its inputs are stored beside each prediction."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from tests.costmodel.golden import FIXTURE, RUNTIME_OPTIONS, golden_cases, predict

REL = 1e-9
GOLDEN: list[dict[str, Any]] = json.loads(FIXTURE.read_text())


def _differences(path: str, want: Any, got: Any) -> list[str]:
    """Every leaf where ``got`` differs from ``want`` beyond `REL` (numbers) or at all."""
    if isinstance(want, dict) and isinstance(got, dict):
        if want.keys() != got.keys():
            return [f"{path}: keys {sorted(want)} != {sorted(got)}"]
        return [d for k in want for d in _differences(f"{path}.{k}", want[k], got[k])]
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [f"{path}: {len(want)} items != {len(got)}"]
        return [
            d
            for i, (a, b) in enumerate(zip(want, got, strict=True))
            for d in _differences(f"{path}[{i}]", a, b)
        ]
    if isinstance(want, float) or isinstance(got, float):
        if not math.isclose(want, got, rel_tol=REL, abs_tol=1e-300):
            return [f"{path}: {want!r} != {got!r}"]
        return []
    return [] if want == got else [f"{path}: {want!r} != {got!r}"]


def test_the_fixture_holds_every_golden_case() -> None:
    stored = [{k: v for k, v in case.items() if k != "prediction"} for case in GOLDEN]
    assert stored == json.loads(json.dumps(golden_cases()))


@pytest.mark.parametrize("case", GOLDEN, ids=[c["name"] for c in GOLDEN])
def test_prediction_matches_the_golden_one(case: dict[str, Any]) -> None:
    got = json.loads(json.dumps(predict(case)))
    assert got.pop("runtime") == RUNTIME_OPTIONS[case["runtime"]].runtime
    want = {k: v for k, v in case["prediction"].items() if k != "runtime"}
    assert not _differences(case["name"], want, got)


def test_the_comparison_sees_a_small_change() -> None:
    want = GOLDEN[0]["prediction"]
    changed = {**want, "iteration_time_s": want["iteration_time_s"] * (1 + 1e-7)}
    assert _differences("x", want, changed)
    assert not _differences("x", want, json.loads(json.dumps(want)))
