"""The shared loop of the in-context probes (`profiles.profiler.in_context`), on one rank."""

from __future__ import annotations

import itertools

import pytest
import torch

from profiles.profiler import in_context
from profiles.profiler.compute import Runner
from profiles.profiler.timing import THREAD_CLOCK, Budget, agree_alone

BUDGET = Budget(warmup_calls=1, min_repeats=2, max_repeats=3, target_s=0.001, min_sample_s=1e-5)


def _run(steal) -> Runner:
    return Runner(
        device=torch.device("cpu"), budget=BUDGET, agree=agree_alone, clock=THREAD_CLOCK,
        steal=steal,
    )  # fmt: skip


def _records(steal, disturbed: set[int]) -> dict[str, tuple[float, ...]]:
    """The records of a chain whose variant costs 1 s more than its base (2 s a pass), and
    10 s more in the ``disturbed`` rounds (counted from 0 after the warm-up)."""
    calls = itertools.count()

    def chain(work: int, variant: int) -> tuple[float, float]:
        call = next(calls)
        round_index = call // 2 - BUDGET.warmup_calls
        extra = 10.0 if round_index in disturbed else 1.0
        return (2.0 + variant * extra, 2.0 + variant * extra)

    records = in_context.time_in_context(
        _run(steal), chain, levels=(1,), extras=("x",), layer="layer", per=(2, 1)
    )
    return {r.op: r.times_s for r in records}


def test_each_sample_is_the_mean_of_consecutive_rounds():
    found = _records(lambda: None, set())
    per_record = in_context.PAIRS // in_context.PAIRS_PER_SAMPLE
    assert found["x_forward_w0"] == pytest.approx((1.0,) * per_record)
    assert found["layer_backward_w0"] == pytest.approx((1.0,) * per_record)  # 2 s over 2 layers


def test_rounds_the_hypervisor_stole_in_are_left_out():
    # the steal counter ticks during rounds 3 and 5 (read before and after every round)
    stolen = {3, 5}
    readings = iter(
        0.01 * len([k for k in stolen if k < end])
        for r in range(in_context.PAIRS)
        for end in (r, r + 1)
    )
    found = _records(readings.__next__, disturbed={3, 5})
    # 22 quiet rounds: five samples of four and one of two, none of the disturbed rounds
    assert found["x_forward_w0"] == pytest.approx((1.0,) * 6)
    # no steal column: every round, the disturbed ones too
    unwatched = _records(lambda: None, disturbed={3, 5})
    assert unwatched["x_forward_w0"] == pytest.approx((3.25, 3.25, 1.0, 1.0, 1.0, 1.0))
