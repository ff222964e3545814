"""Collective fits from measured calls (`reports.calibrate_comm`): the wire time of a call is
its shortest duration over the group, latency-bound sizes keep the profile's bandwidth, one
bandwidth-bound size refits it, and too few calls keep the profile's fit."""

from __future__ import annotations

import pytest

from profiles.lookup import collective_fit
from reports.calibrate_comm import MIN_CALLS, comm_samples, fit_alpha_beta, fit_collectives
from tests.reports.calibrate_runs import dp_all_reduce_call, hand_made_run


def test_wire_time_is_the_shortest_duration_over_the_group(base) -> None:
    # Known line: 200 us + bytes / 2 GB/s (all_reduce over 2 ranks: bus factor 1). Each
    # call has one rank waiting for the other; the waits alternate between ranks.
    latency_s, busbw = 200e-6, 2.0
    events, clock = [], 0.0
    for i, size in enumerate([2**20, 2**22, 2**24] * 3):
        wire_s = latency_s + size / (busbw * 1e9)
        waits = (0.0, 3e-3 * (1 + i)) if i % 2 else (5e-3, 0.0)
        for rank, wait in enumerate(waits):
            events.append(dp_all_reduce_call(rank, clock - wait, wire_s + wait, size))
        clock += 0.1
    samples = comm_samples(hand_made_run(events), base)
    assert len(samples) == 9 and {s.key for s in samples} == {("all_reduce", 2, "intra")}
    (fit,) = fit_collectives(base, samples)
    assert fit.latency_s == pytest.approx(latency_s, rel=1e-6)
    assert fit.busbw_GBps == pytest.approx(busbw, rel=1e-6)


def test_latency_bound_sizes_keep_the_base_bandwidth(base) -> None:
    fit = collective_fit(base, "all_reduce", 2, "intra")
    # 4 and 512 bytes are far below the bandwidth range: a slope through them would
    # extrapolate noise to large messages.
    points = [(4.0, 3 * fit.latency_s), (512.0, 3.1 * fit.latency_s)]
    latency_s, busbw = fit_alpha_beta("all_reduce", 2, points, fit)
    assert busbw == fit.busbw_GBps
    assert 2.9 * fit.latency_s < latency_s < 3.1 * fit.latency_s


def test_one_bandwidth_bound_size_refits_the_bandwidth(base) -> None:
    fit = collective_fit(base, "all_reduce", 2, "intra")
    size = 64 * fit.busbw_GBps * 1e9 * fit.latency_s  # transfer = 64 x latency
    seconds = fit.latency_s + 2 * size / (fit.busbw_GBps * 1e9)
    latency_s, busbw = fit_alpha_beta("all_reduce", 2, [(size, seconds)], fit)
    assert latency_s == fit.latency_s
    assert busbw == pytest.approx(fit.busbw_GBps / 2)


def test_too_few_calls_keep_the_profile_fit(base) -> None:
    events = [dp_all_reduce_call(0, 0.1 * i, 0.05, 2**20) for i in range(MIN_CALLS - 1)]
    assert fit_collectives(base, comm_samples(hand_made_run(events), base)) == ()
