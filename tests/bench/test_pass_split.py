"""The pass-split bench (`bench/pass_split.py`, loaded by path): its prediction reads the
cost model's breakdown per microbatch, its measurement times every recompute setting, and
its table compares the two."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from profiles.store import save_profile
from tests.bench.bench_loader import load_bench
from tests.costmodel.cpu_fixture import cpu_profile


def _load():
    return load_bench("pass_split")


def _args(tmp_path: Path, **overrides) -> argparse.Namespace:
    profile = save_profile(cpu_profile(), tmp_path / "profile.json")
    values = dict(
        profile=str(profile),
        model="tiny",
        seq_len=32,
        mbs=1,
        microbatches=2,
        rounds=1,
        warmup_rounds=0,
    )
    return argparse.Namespace(**(values | overrides))


def test_the_prediction_is_the_breakdown_per_microbatch(tmp_path):
    bench = _load()
    one = _args(tmp_path, microbatches=1)
    two = _args(tmp_path, microbatches=2)
    plain, full = bench.predicted(two, "none"), bench.predicted(two, "full")
    # a microbatch costs the same however many the step runs (one stage, no overlap)
    assert bench.predicted(one, "none").forward_s == pytest.approx(plain.forward_s, rel=1e-9)
    # full recompute reruns at least the forward in the backward
    assert full.backward_s - plain.backward_s >= plain.forward_s * 0.9
    assert bench.predicted(two, "selective").backward_s > plain.backward_s


def test_every_setting_is_timed_and_compared(tmp_path):
    bench = _load()
    args = _args(tmp_path)
    found = bench.measured(args)
    assert set(found) == set(bench.VARIANTS)
    assert all(s.forward_s > 0 and s.backward_s > 0 for s in found.values())
    model = {v: bench.predicted(args, v) for v in bench.VARIANTS}
    rows = bench.table(found, model)
    assert [r["recompute"] for r in rows] == list(bench.VARIANTS)
    assert rows[0]["measured_added"] == 0.0 and rows[0]["predicted_added"] == 0.0
    full = rows[2]
    assert full["predicted_added"] == pytest.approx(
        (model["full"].forward_s + model["full"].backward_s)
        / (model["none"].forward_s + model["none"].backward_s)
        - 1.0
    )


def test_bad_counts_are_refused(tmp_path, monkeypatch, capsys):
    bench = _load()
    monkeypatch.setattr(sys, "argv", ["pass_split.py", "--profile", "x.json", "--rounds", "0"])
    with pytest.raises(bench.SpecError, match="--rounds must be at least 1"):
        bench.main()
