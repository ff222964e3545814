"""Host rates of the executor model's collectives (`costmodel.runtimes.torch.rates.host_rates`):
the excess of waited collectives over the sweep's fit, the ranks' drift, the functional and
autograd all-to-all extras, DTensor's redistribution, and which spreads are read by their
median."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.runtimes.torch.rates import host_rates
from profiles.schema_provenance import MeasurementSpread
from tests.costmodel.cpu_fixture import cpu_profile, spread, spread_over_fit


def test_paired_differences_are_read_by_their_median_and_the_rest_by_the_mean():
    def skewed(name: str) -> MeasurementSpread:
        # eight windows, one of them a spell that slowed the plain call: mean 0.1 ms
        return MeasurementSpread(
            quantity=f"op_overhead.{name}", unit="s", num_samples=8, mean=100e-6,
            stdev=5e-4, min=-1.3e-3, max=320e-6, median=300e-6,
        )  # fmt: skip

    names = ("functional_all_reduce", "redistribute_all_gather", "autograd_all_to_all")
    rates = host_rates(cpu_profile(extra=(*map(skewed, names), skewed("p2p_post"))))
    assert rates.functional_s("all_reduce") == pytest.approx(300e-6)
    assert rates.autograd_exchange_s == pytest.approx(300e-6)
    # the redistribution extra is read relative to the dispatch, less what layers count
    older = host_rates(
        cpu_profile(
            extra=(
                dataclasses.replace(skewed("redistribute_all_gather"), mean=300e-6, median=None),
            )
        )
    )
    assert rates.redistribute_s("all_gather") == pytest.approx(older.redistribute_s("all_gather"))
    assert rates.redistribute_s("all_gather") > 0
    # a spread of another kind (a mean of waits) keeps its mean
    assert rates.p2p_post_s == pytest.approx(100e-6)
    # a profile written before the median was recorded: the mean
    bare = dataclasses.replace(skewed("functional_all_reduce"), median=None)
    assert host_rates(cpu_profile(extra=(bare,))).functional_s("all_reduce") == pytest.approx(
        100e-6
    )


def test_waited_collectives_pay_their_typical_excess():
    entries = (
        spread_over_fit("all_reduce", 1024, 1.0e-3),
        spread_over_fit("all_reduce", 4096, 1.4e-3),
        spread_over_fit("all_reduce", 65536, 0.8e-3),
    )
    rates = host_rates(cpu_profile(extra=entries))
    assert rates.excess_s("all_reduce", 2) == pytest.approx(1.0e-3)  # median of 1.0, 1.4, 0.8
    assert rates.excess_s("all_reduce", 4) == pytest.approx(1.0e-3)  # nearest group size
    assert rates.excess_s("all_gather", 2) == 0.0 and rates.excess_s("all_reduce", 1) == 0.0


def test_the_excess_is_read_above_the_fit_and_above_the_minimum_without_one():
    # the fit describes the fast edge of the samples, not the single fastest one
    (over,) = (spread_over_fit("all_to_all", 1024, 0.3e-3),)
    assert over.min < over.mean - 0.3e-3  # a minimum far below the fit is not the base
    no_fit = spread("all_to_all.intra.3.1024B", 0.9e-3, 0.5e-3)  # no fit of 3 ranks
    rates = host_rates(cpu_profile(extra=(over, no_fit)))
    assert rates.excess_s("all_to_all", 2) == pytest.approx(0.3e-3)
    assert rates.excess_s("all_to_all", 3) == pytest.approx(0.4e-3)


def test_layer_collectives_pay_at_least_the_ranks_drift_after_host_work():
    entries = (
        spread_over_fit("all_reduce", 1024, 1.0e-3),
        spread_over_fit("all_to_all", 1024, 0.1e-3),
        spread("op_overhead.sync_wait", 0.6e-3),
    )
    rates = host_rates(cpu_profile(extra=entries))
    assert rates.sync_excess_s == pytest.approx(0.6e-3)  # read as measured
    assert rates.waited_excess_s("all_reduce", 2) == pytest.approx(1.0e-3)  # its own excess
    assert rates.waited_excess_s("all_to_all", 2) == pytest.approx(0.6e-3)  # the drift
    assert rates.waited_excess_s("all_gather", 2) == pytest.approx(0.6e-3)  # no sweep point
    assert rates.waited_excess_s("all_to_all", 1) == 0.0  # one rank waits for nobody
    assert rates.excess_s("all_to_all", 2) == pytest.approx(0.1e-3)  # unchanged
    assert host_rates(cpu_profile()).sync_excess_s == 0.0  # not measured: the excess alone


def test_the_autograd_all_to_all_pays_its_measured_exchange():
    functional = spread("op_overhead.functional_all_to_all", 300e-6)
    measured = host_rates(
        cpu_profile(extra=(functional, spread("op_overhead.autograd_all_to_all", 900e-6)))
    )
    assert measured.autograd_exchange_s == pytest.approx(900e-6)  # read as measured
    older = host_rates(cpu_profile(extra=(functional,)))
    assert older.autograd_exchange_s == pytest.approx(600e-6)  # fallback: two functional calls
    noise = host_rates(cpu_profile(extra=(spread("op_overhead.autograd_all_to_all", -1e-4),)))
    assert noise.autograd_exchange_s == 0.0
    assert host_rates(cpu_profile()).autograd_exchange_s == 0.0


def test_functional_collectives_pay_their_measured_extra():
    # op_overhead.add is the profile's dispatch here, so the spreads are read as measured
    entries = (
        spread("op_overhead.functional_all_to_all", 500e-6),
        spread("op_overhead.functional_reduce_scatter", -100e-6),  # noise below the plain call
    )
    rates = host_rates(cpu_profile(extra=entries))
    assert rates.functional_s("all_to_all") == pytest.approx(500e-6)
    assert rates.functional_s("reduce_scatter") == 0.0
    assert rates.functional_s("all_gather") == 0.0  # not measured: nothing added
    assert host_rates(cpu_profile()).functional_s("all_to_all") == 0.0


def test_a_calibrated_host_speed_scales_the_redistribution_extra_not_the_functional_one():
    # both read from spreads of 300 µs; the plain dispatch of the same sweep is 2 µs
    entries = (
        spread("op_overhead.add", 2e-6),
        spread("op_overhead.redistribute_all_gather", 300e-6),
        spread("op_overhead.functional_all_gather", 300e-6),
    )
    plain = cpu_profile(extra=entries)
    slower = dataclasses.replace(
        plain, compute=dataclasses.replace(plain.compute, op_overhead_s=2 * 2e-6)
    )
    a, b = host_rates(plain), host_rates(slower)
    # DTensor's redistribution is host work: it follows the dispatch, net of what the
    # layers count (its DTensor operator and to_local, which follow it too)
    counted_a = a.dtensor_forward_s + a.dtensor_to_local_s
    assert a.redistribute_s("all_gather") == pytest.approx(300e-6 - counted_a)
    assert b.redistribute_s("all_gather") == pytest.approx(2 * (300e-6 - counted_a))
    # the functional extra is a collective's cost, read as measured
    assert b.functional_s("all_gather") == a.functional_s("all_gather") == pytest.approx(300e-6)
