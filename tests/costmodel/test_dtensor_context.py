"""DTensor's operators priced in their chain (`costmodel.runtimes.torch.dtensor_rates`, applied by
`costmodel.runtimes.torch.passes.chunk_ops`)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from costmodel.passes import comm_groups
from costmodel.runtimes.torch import dtensor_rates as model
from costmodel.runtimes.torch.ops import HostOps, host_seconds
from costmodel.runtimes.torch.passes import executor_pass_costs
from costmodel.runtimes.torch.rates import host_rates
from costmodel.scale_up import RankPacking
from costmodel.topology import plan_placements
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from tests.costmodel.cpu_fixture import cpu_profile, spread

TINY = get_preset("tiny")
JOB = TrainingJob(seq_length=128, global_batch_size=8, precision="fp32")
HOST = (1.0e-3, 4.0e-3)
"""The probe's plain block per level and pass, seconds."""


def probe_spreads(extra: dict[str, tuple[float, float]], host=HOST):
    """Spreads of the probe: per pass the pattern's in-context cost at each level."""
    out = []
    for level in range(model.LEVELS):
        for p in ("forward", "backward"):
            out += [
                spread(f"op_overhead.dtensor_layer_{p}_w{level}", host[level]),
                spread(f"op_overhead.dtensor_context_{p}_w{level}", extra[p][level]),
            ]
    return tuple(out)


def rates_with(extra):
    profile = cpu_profile(extra=probe_spreads(extra))
    return profile, host_rates(profile)


def test_without_the_records_dtensor_costs_its_loop_figures():
    rates = host_rates(cpu_profile())
    assert rates.dtensor_context is None
    assert model.dtensor_factor(rates, backward=False, host_s=2e-3) == 1.0
    work = HostOps(dt_linears=3, dt_wraps=2, ops=10)
    assert model.dtensor_context_s(rates, work, backward=False, layers=1) == 0.0


def test_every_record_is_needed():
    means = {
        s.quantity.removeprefix("op_overhead."): s.mean
        for s in probe_spreads({"forward": (1, 2), "backward": (1, 2)})
    }
    assert model.dtensor_context_rates(means, 1.0) is not None
    for name in means:
        assert model.dtensor_context_rates({k: v for k, v in means.items() if k != name}, 1) is None


@given(
    ratio=st.tuples(st.floats(0.5, 5.0), st.floats(0.5, 5.0)),
    scale=st.floats(0.5, 2.0),
    position=st.floats(-0.5, 1.5),
)
def test_the_factor_is_the_in_context_cost_over_the_loop_price(ratio, scale, position):
    """k(H) interpolates the two levels' ratios; host work and costs both move with the
    calibration's scale, the loop price too, so k does not."""
    base = host_rates(cpu_profile())
    loop = {p: model.pattern_s(base, backward=p == "backward") for p in ("forward", "backward")}
    extra = {p: (ratio[0] * loop[p], ratio[1] * loop[p]) for p in loop}
    means = {s.quantity.removeprefix("op_overhead."): s.mean for s in probe_spreads(extra)}
    context = model.dtensor_context_rates(means, scale)
    assert context is not None
    host_s = scale * (HOST[0] + position * (HOST[1] - HOST[0]))
    clamped = min(max(position, 0.0), 1.0)
    expected = ratio[0] + clamped * (ratio[1] - ratio[0])
    loop_fields = ("dtensor_from_local_s", "dtensor_to_local_s")
    loop_fields += ("dtensor_linear_forward_s", "dtensor_linear_backward_s")
    scaled = replace(
        base, dtensor_context=context, **{f: getattr(base, f) * scale for f in loop_fields}
    )
    for backward in (False, True):
        got = model.dtensor_factor(scaled, backward=backward, host_s=host_s)
        assert got == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("backward", [False, True])
def test_a_pass_pays_its_dtensor_operators_times_the_factor_less_their_loop_price(backward):
    _, rates = rates_with({"forward": (3e-4, 3e-4), "backward": (6e-4, 6e-4)})
    work = HostOps(dt_ops=4, dt_wraps=2, dt_unwraps=2, dt_linears=2, ops=30, bytes=1e6)
    dtensor = HostOps(dt_ops=4, dt_wraps=2, dt_unwraps=2, dt_linears=2)
    k = (6e-4 if backward else 3e-4) / model.pattern_s(rates, backward=backward)
    got = model.dtensor_context_s(rates, work, backward=backward, layers=2)
    assert got == pytest.approx((k - 1) * host_seconds(dtensor, rates, backward=backward))
    # nothing to charge without DTensor operators
    assert model.dtensor_context_s(rates, HostOps(ops=30), backward=backward, layers=2) == 0.0


def test_tensor_parallel_passes_carry_the_difference_and_plain_ones_do_not():
    cheap = {"forward": (1e-5, 1e-5), "backward": (1e-5, 1e-5)}
    costly = {"forward": (1e-3, 1e-3), "backward": (2e-3, 2e-3)}
    results = {}
    for name, extra in (("cheap", cheap), ("costly", costly)):
        profile, rates = rates_with(extra)
        for plan in (ParallelPlan(tp=2), ParallelPlan(dp=2)):
            groups = comm_groups(plan_placements(profile, plan, RankPacking(gpus_per_node=4)))
            forward, backward, _ = executor_pass_costs(
                TINY, JOB, plan, profile, rates, groups, 0, 0
            )
            results[name, plan.tp] = (forward.compute_s, backward.compute_s)
    assert results["cheap", 1] == pytest.approx(results["costly", 1])
    assert results["costly", 2][0] > results["cheap", 2][0]
    assert results["costly", 2][1] > results["cheap", 2][1]
