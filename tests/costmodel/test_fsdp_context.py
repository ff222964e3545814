"""FSDP2's gathers priced in their chain (`costmodel.runtimes.torch.fsdp_rates`,
`costmodel.runtimes.torch.sync.fsdp_gather_s`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from costmodel.passes import comm_groups
from costmodel.runtimes.torch.fsdp_rates import (
    PROBE_GATHER_BYTES,
    PROBE_TENSORS,
    fsdp_context_rates,
)
from costmodel.runtimes.torch.in_context_rates import InContext
from costmodel.runtimes.torch.ops import FP32
from costmodel.runtimes.torch.pricing import executor_chunk_costs
from costmodel.runtimes.torch.rates import host_rates
from costmodel.runtimes.torch.sync import fsdp_gather_s, stage_layout
from costmodel.scale_up import RankPacking
from costmodel.topology import plan_placements
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from tests.costmodel.cpu_fixture import cpu_profile, in_context_spreads

TINY = get_preset("tiny")
JOB = TrainingJob(seq_length=128, global_batch_size=8, precision="fp32")
DP = ParallelPlan(dp=2)
FSDP = ParallelPlan(dp=2, distributed_optimizer=True)
PROBE_PARAMS = PROBE_GATHER_BYTES / FP32


def probe_spreads(levels: dict[str, tuple[tuple[float, float], tuple[float, float]]]):
    """Spreads of the probe: per pass ((host, extra) idle, (host, extra) worked)."""
    return in_context_spreads("fsdp_context", "fsdp_layer", levels)


FLAT = {"forward": ((1.0, 3e-3), (2.0, 5e-3)), "backward": ((1.0, 2e-3), (2.0, 4e-3))}
"""Levels far above any pass's host work: every gather pays the idle level's figure."""


def probed(levels=FLAT):
    profile = cpu_profile(extra=probe_spreads(levels))
    return profile, host_rates(profile)


def group(profile, plan=FSDP):
    return plan_placements(profile, plan, RankPacking(gpus_per_node=4))["dp-cp"]


def test_rates_need_every_probe_figure_and_scale_the_host_levels_only():
    means = {s.quantity.removeprefix("op_overhead."): s.mean for s in probe_spreads(FLAT)}
    got = fsdp_context_rates(means, scale=2.0)
    assert got == InContext(forward=((2.0, 3e-3), (4.0, 5e-3)), backward=((2.0, 2e-3), (4.0, 4e-3)))
    for key in means:
        assert fsdp_context_rates({k: v for k, v in means.items() if k != key}, 1.0) is None
    assert host_rates(cpu_profile()).fsdp_context is None


@given(host=st.floats(0.0, 3.0), backward=st.booleans())
def test_a_module_of_the_probes_size_costs_the_probes_figure(host, backward):
    profile, rates = probed()
    assert rates.fsdp_context is not None
    got = fsdp_gather_s(
        profile, rates, PROBE_PARAMS, PROBE_TENSORS, group(profile), host_s=host, backward=backward
    )
    assert got == pytest.approx(rates.fsdp_context.extra_s(backward=backward, host_s=host))


def test_tensors_and_bytes_beyond_the_probes_block_are_added_and_the_total_never_negative():
    profile, rates = probed()
    g = group(profile)

    def gather(params, tensors):
        return fsdp_gather_s(profile, rates, params, tensors, g, host_s=0.0, backward=False)

    base = gather(PROBE_PARAMS, PROBE_TENSORS)
    # each further tensor: the idle module's per-tensor figure (fixture: 30 us)
    assert gather(PROBE_PARAMS, PROBE_TENSORS + 2) - base == pytest.approx(
        2 * rates.fsdp_gather_tensor_s
    )
    # more bytes: longer copies and a longer collective; fewer: shorter
    assert gather(4 * PROBE_PARAMS, PROBE_TENSORS) > base > gather(PROBE_PARAMS / 4, PROBE_TENSORS)
    # a tiny module of one tensor when the probe's figure is 0: nothing, not a credit
    _, zero_rates = probed({p: ((1.0, 0.0), (2.0, 0.0)) for p in ("forward", "backward")})
    assert fsdp_gather_s(profile, zero_rates, 10, 1, g, host_s=0.0, backward=False) == 0.0


def chunk(profile, plan):
    placements = plan_placements(profile, plan, RankPacking(gpus_per_node=4))
    return executor_chunk_costs(TINY, JOB, plan, profile, comm_groups(placements), placements)[0][0]


def test_each_module_gathers_once_per_pass_at_the_passes_host_work():
    profile, rates = probed()
    base, fsdp = chunk(profile, DP), chunk(profile, FSDP)
    params = stage_layout(TINY, DP, 0)
    modules = list(zip(params.blocks[:-1], [9] * TINY.num_layers, strict=True))
    modules.append((params.blocks[-1], 3))  # the root: embedding, final norm, output
    g = group(profile)
    for backward, got in ((False, fsdp.forward), (True, fsdp.backward)):
        want = sum(
            fsdp_gather_s(profile, rates, p, t, g, host_s=0.0, backward=backward)
            for p, t in modules
        )
        before = base.backward if backward else base.forward
        assert got.compute_s - before.compute_s == pytest.approx(want)
    # the figures are the idle level's (3 ms forward, 2 ms backward per module of the
    # probe's size): the plan's layers hold less host work than the levels
    assert fsdp.forward.compute_s - base.forward.compute_s > 4 * 3e-3 * 0.5


def test_the_passes_host_work_moves_the_figure_between_the_levels():
    # levels around the tiny model's host work per layer: the gathers cost more in the
    # worked chunk than at the idle level and less than at the worked one
    plain = chunk(cpu_profile(), DP)
    per_layer = plain.forward.compute_s / TINY.num_layers
    around = {
        "forward": ((0.0, 1e-3), (2 * per_layer, 3e-3)),
        "backward": ((0.0, 1e-3), (2 * per_layer, 3e-3)),
    }
    low = {p: ((0.0, 1e-3), (2 * per_layer, 1e-3)) for p in ("forward", "backward")}
    high = {p: ((0.0, 3e-3), (2 * per_layer, 3e-3)) for p in ("forward", "backward")}
    costs = [
        chunk(cpu_profile(extra=probe_spreads(x)), FSDP).forward.compute_s
        for x in (low, around, high)
    ]
    assert costs[0] < costs[1] < costs[2]
    # halfway: the middle of the two flat ones
    assert costs[1] == pytest.approx((costs[0] + costs[2]) / 2, rel=0.02)
