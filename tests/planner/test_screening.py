"""`planner.screening`: the time-bounded screen returns what screening every candidate
returns."""

from __future__ import annotations

import functools

import pytest

from planner import screening
from planner.search import search_plans
from planner.search_result import BOUND_REJECTION
from profiles import load_profile
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.presets import get_preset

H100 = "h100-sxm-80gb"


@functools.cache
def _profile():
    return load_profile(H100)


def _inputs(name: str, gpus: int, seq: int, batch: int):
    return (
        get_preset(name),
        ClusterSpec(hardware=H100, num_gpus=gpus),
        TrainingJob(seq_length=seq, global_batch_size=batch),
    )


CASES = [
    ("tiny-moe", 8, 512, 32, 3),
    ("tiny", 8, 1024, 64, 5),
    ("mixtral-8x7b", 32, 4096, 64, 4),
    ("llama3-8b", 16, 4096, 32, 3),
]


@pytest.mark.parametrize(("name", "gpus", "seq", "batch", "top_k"), CASES)
def test_bounded_search_returns_the_exhaustive_plans(monkeypatch, name, gpus, seq, batch, top_k):
    """Small first rounds force several rounds and real skips; the simulated plans, in
    order, and the best plan are those of screening every candidate."""
    model, cluster, job = _inputs(name, gpus, seq, batch)
    monkeypatch.setattr(screening, "FIRST_ROUND_ROWS", 50)
    bounded = search_plans(model, cluster, job, _profile(), top_k=top_k)
    full = search_plans(model, cluster, job, _profile(), top_k=top_k, prune=False)
    assert [r.plan for r in bounded.top] == [r.plan for r in full.top]
    assert [r.plan for r in bounded.closest] == [r.plan for r in full.closest]
    assert bounded.rejected.get(BOUND_REJECTION, 0) > 0
    assert bounded.num_screened < full.num_screened
    assert BOUND_REJECTION not in full.rejected
    skipped = bounded.candidates["rejected_by"] == BOUND_REJECTION
    assert int(skipped.sum()) == bounded.rejected[BOUND_REJECTION]
