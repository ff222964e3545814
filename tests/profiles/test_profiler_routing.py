"""The routing probe (profiles/profiler/routing.py)."""

from __future__ import annotations

import statistics

import torch

from profiles.profiler.compute import Runner
from profiles.profiler.routing import (
    ROUNDS_PER_SAMPLE,
    ROUTING_EXPERTS,
    ROUTING_ROUNDS,
    ROUTING_TOKENS,
    ROUTING_TOP_K,
    ROUTING_WIDTH,
    _route,
    time_routing,
)
from profiles.profiler.timing import THREAD_CLOCK, Budget, agree_alone

RUN = Runner(
    device=torch.device("cpu"),
    budget=Budget(warmup_calls=1, min_repeats=3, max_repeats=3, target_s=0.005, min_sample_s=1e-4),
    agree=agree_alone,
    clock=THREAD_CLOCK,
)


def test_routing_is_timed_per_operator_in_blocks_of_cold_rounds():
    (record,) = time_routing(RUN)
    assert record.quantity == "op_overhead.routing_op"
    assert len(record.times_s) == ROUTING_ROUNDS // ROUNDS_PER_SAMPLE
    # per operator: above nothing, below a millisecond on any host (the median: a sample
    # of a loaded host may spike)
    assert all(t >= 0 for t in record.times_s)
    assert 0 < statistics.median(record.times_s) < 1e-3


def test_a_round_routes_every_token_to_its_top_k_experts():
    torch.manual_seed(0)
    x = torch.randn(ROUTING_TOKENS, ROUTING_WIDTH)
    router = torch.randn(ROUTING_EXPERTS, ROUTING_WIDTH, requires_grad=True)
    out, aux, counts = _route(x, router)
    assert int(counts.sum()) == ROUTING_TOKENS * ROUTING_TOP_K
    # the softmax-normalized top-k weights of a token sum to one: the combine returns x
    torch.testing.assert_close(out, x)
    assert aux.requires_grad and aux.item() > 0
