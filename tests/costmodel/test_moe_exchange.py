"""The MoE layer's expert-parallel exchanges priced in context
(`costmodel.runtimes.torch.moe_exchange_rates`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from costmodel.runtimes.torch.in_context_rates import InContext
from costmodel.runtimes.torch.moe_exchange_rates import moe_exchange_rates
from costmodel.runtimes.torch.rates import host_rates
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from tests.costmodel.cpu_fixture import cpu_profile, in_context_spreads
from tests.costmodel.torch_fixture import sim as fixture_sim

MOE = get_preset("tiny-moe")
JOB = TrainingJob(seq_length=128, global_batch_size=8, precision="fp32")
EP = ParallelPlan(dp=2, ep=2)

seconds = st.floats(min_value=0.0, max_value=0.05)


def probe_spreads(levels: dict[str, tuple[tuple[float, float], tuple[float, float]]]):
    """Spreads of the probe: per pass ((host, extra) idle, (host, extra) worked)."""
    return in_context_spreads("moe_exchange", "moe_layer", levels)


@given(h0=seconds, gap=seconds, e0=seconds, e1=seconds, host=st.floats(0.0, 0.2))
def test_the_extra_interpolates_between_the_levels_and_holds_outside(h0, gap, e0, e1, host):
    h1 = h0 + gap
    x = InContext(forward=((h0, e0), (h1, e1)), backward=((h0, e1), (h1, e0)))
    got = x.extra_s(backward=False, host_s=host)
    assert got >= 0
    assert min(e0, e1) - 1e-12 <= got <= max(e0, e1) + 1e-12
    if host <= h0:
        assert got == e0
    elif host >= h1:
        assert got == e1
    else:
        assert got == pytest.approx(e0 + (e1 - e0) * (host - h0) / gap)
    # the backward reads its own points
    assert x.extra_s(backward=True, host_s=h0) == e1


def test_a_negative_difference_costs_nothing():
    x = InContext(forward=((0.0, -1e-3), (1e-3, -2e-3)), backward=((0.0, 0.0), (1.0, 0.0)))
    assert x.extra_s(backward=False, host_s=5e-4) == 0.0


def test_rates_need_every_probe_figure_and_scale_the_host_levels_only():
    levels = {"forward": ((1e-3, 2e-3), (4e-3, 3e-3)), "backward": ((1e-3, 1e-3), (5e-3, 2e-3))}
    means = {s.quantity.removeprefix("op_overhead."): s.mean for s in probe_spreads(levels)}
    x = moe_exchange_rates(means, scale=2.0)
    assert x == InContext(
        forward=((2e-3, 2e-3), (8e-3, 3e-3)), backward=((2e-3, 1e-3), (10e-3, 2e-3))
    )
    for key in means:
        assert moe_exchange_rates({k: v for k, v in means.items() if k != key}, 1.0) is None


def sim(profile, plan=EP):
    return fixture_sim(plan, MOE, JOB, profile)


def test_a_probed_profile_prices_each_layer_once_per_pass():
    # levels far above any pass's host work: every layer pays the worked level's figure
    flat = {"forward": ((1.0, 0.0), (2.0, 4e-3)), "backward": ((1.0, 0.0), (2.0, 3e-3))}
    worked = {"forward": ((1e-9, 1.0), (2e-9, 4e-3)), "backward": ((1e-9, 1.0), (2e-9, 3e-3))}
    idle = sim(cpu_profile(extra=probe_spreads(flat)))
    busy = sim(cpu_profile(extra=probe_spreads(worked)))
    per_step = EP.num_microbatches(JOB.global_batch_size) * MOE.num_layers
    # below the idle level every layer pays the idle figure (0); above the worked level
    # the worked one, per layer and pass; the count exchange is inside the figure
    assert busy.breakdown.ep_exposed_s - idle.breakdown.ep_exposed_s == pytest.approx(
        per_step * (4e-3 + 3e-3), rel=1e-6
    )
    assert host_rates(cpu_profile()).moe_exchange is None


def test_without_the_probe_each_exchange_is_priced_call_by_call():
    # an earlier profile: the exchanges cost their fits, excess and autograd extra, more
    # than the in-context figure of 0 (the fixture's fits alone are hundreds of µs)
    zero = {"forward": ((1e-3, 0.0), (2e-3, 0.0)), "backward": ((1e-3, 0.0), (2e-3, 0.0))}
    probed = sim(cpu_profile(extra=probe_spreads(zero)))
    per_call = sim(cpu_profile())
    assert per_call.breakdown.ep_exposed_s > probed.breakdown.ep_exposed_s
    # the wire: the plan's token exchanges match the probe's size here (one sequence of
    # 128 tokens, top-2, hidden 128), so an in-context figure of 0 leaves only the
    # statistics' all-reduce, which ep2 dp2 does not run
    assert probed.breakdown.ep_exposed_s == pytest.approx(0.0, abs=1e-12)
    # a plan without expert parallelism has no exchange to price
    assert (
        sim(cpu_profile(extra=probe_spreads(zero)), ParallelPlan(dp=2)).breakdown.ep_exposed_s == 0
    )
