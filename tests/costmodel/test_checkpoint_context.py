"""Activation checkpointing priced in its chain (`costmodel.runtimes.torch.checkpoint_rates`,
`costmodel.runtimes.torch.passes.checkpoint_hooks_s`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from costmodel.passes import comm_groups
from costmodel.runtimes.torch.checkpoint_rates import (
    PROBE_WORK,
    SAVED_PER_PRODUCT,
    CheckpointContext,
    checkpoint_context_rates,
)
from costmodel.runtimes.torch.in_context_rates import InContext
from costmodel.runtimes.torch.layers import layer_ops
from costmodel.runtimes.torch.ops import host_seconds
from costmodel.runtimes.torch.passes import (
    SAVED_PER_RECORDED_OP,
    SDPA_SAVED_TENSORS,
    checkpoint_hooks_s,
    executor_pass_costs,
)
from costmodel.runtimes.torch.rates import host_rates
from costmodel.runtimes.torch.shapes import rank_shape
from costmodel.scale_up import RankPacking
from costmodel.topology import plan_placements
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from tests.costmodel.cpu_fixture import cpu_profile, spread

TINY = get_preset("tiny")
JOB = TrainingJob(seq_length=128, global_batch_size=8, precision="fp32")
FORWARD_HOST = (1.0, 4.0)
"""The probe's plain block forward per level, seconds (far above any layer's: the levels
hold at the first)."""


def probe_spreads(call, tensor, host=FORWARD_HOST):
    """Spreads the probe would record for per-call ``call[pass]`` and per-tensor
    ``tensor[pass]`` costs, the same at both levels, and the plain block's pass ``host``
    (backward as the forward): each variant's difference is its hooks plus, in backward,
    its rerun (the block, or one of its products)."""
    out = []
    for level, work in enumerate(PROBE_WORK):
        forward = host[level]
        for p in ("forward", "backward"):
            rerun = forward if p == "backward" else 0.0
            full = call[p] + work * SAVED_PER_PRODUCT * tensor[p] + rerun
            part = call[p] + SAVED_PER_PRODUCT * tensor[p] + rerun / work
            out += [
                spread(f"op_overhead.ckpt_layer_{p}_w{level}", forward),
                spread(f"op_overhead.ckpt_full_{p}_w{level}", full),
                spread(f"op_overhead.ckpt_part_{p}_w{level}", part),
            ]
    return tuple(out)


CALL = {"forward": 300e-6, "backward": 200e-6}
TENSOR = {"forward": 5e-6, "backward": 20e-6}


def rates_with(call=CALL, tensor=TENSOR):
    profile = cpu_profile(extra=probe_spreads(call, tensor))
    return profile, host_rates(profile)


@given(
    call=st.tuples(st.floats(0, 1e-3), st.floats(0, 1e-3)),
    tensor=st.tuples(st.floats(0, 5e-5), st.floats(0, 5e-5)),
    scale=st.floats(0.5, 2.0),
)
def test_the_call_and_tensor_costs_are_recovered_from_the_two_variants(call, tensor, scale):
    c = dict(zip(("forward", "backward"), call, strict=True))
    t = dict(zip(("forward", "backward"), tensor, strict=True))
    means = {s.quantity.removeprefix("op_overhead."): s.mean for s in probe_spreads(c, t)}
    got = checkpoint_context_rates(means, scale)
    assert got is not None
    for p in ("forward", "backward"):
        for (host, call_s), (host_t, tensor_s), level_host in zip(
            getattr(got.call, p), getattr(got.tensor, p), FORWARD_HOST, strict=True
        ):
            assert host == host_t == pytest.approx(level_host * scale)
            assert call_s == pytest.approx(c[p] * scale, abs=1e-12)
            assert tensor_s == pytest.approx(t[p] * scale, abs=1e-12)


def test_rates_need_every_record():
    means = {s.quantity.removeprefix("op_overhead."): s.mean for s in probe_spreads(CALL, TENSOR)}
    for key in means:
        assert checkpoint_context_rates({k: v for k, v in means.items() if k != key}, 1.0) is None
    assert host_rates(cpu_profile()).checkpoint_context is None


def test_costs_interpolate_on_the_pass_host_work_and_never_go_negative():
    ctx = CheckpointContext(
        call=InContext(forward=((1.0, 1e-3), (3.0, 3e-3)), backward=((1.0, -1e-3), (3.0, 0.0))),
        tensor=InContext(forward=((1.0, 1e-5), (3.0, 1e-5)), backward=((1.0, 2e-5), (3.0, 2e-5))),
    )
    assert ctx.hooks_s(backward=False, host_s=2.0, saved=10) == pytest.approx(2e-3 + 1e-4)
    assert ctx.hooks_s(backward=False, host_s=0.5, saved=0) == pytest.approx(1e-3)
    assert ctx.hooks_s(backward=True, host_s=9.0, saved=10) == pytest.approx(2e-4)


def _layer(profile, rates, plan):
    return layer_ops(TINY, profile, rates, plan, rank_shape(plan, 128, 8), is_moe=False)


@pytest.mark.parametrize("backward", [False, True])
def test_each_layer_pays_one_call_and_its_saved_tensors(backward):
    p = "backward" if backward else "forward"
    profile, rates = rates_with()
    kinds = {False: _layer(profile, rates, ParallelPlan())}
    layer = kinds[False]
    recorded = layer.forward.ops + layer.forward.dt_ops
    cases = {
        ParallelPlan(recompute="selective"): 4 * (CALL[p] + SDPA_SAVED_TENSORS * TENSOR[p]),
        ParallelPlan(recompute="full"): 4
        * (CALL[p] + SAVED_PER_RECORDED_OP * recorded * TENSOR[p]),
        # two layers per checkpoint: half the calls, the same tensors
        ParallelPlan(recompute="full", recompute_num_layers=2): 2 * CALL[p]
        + 4 * SAVED_PER_RECORDED_OP * recorded * TENSOR[p],
        # the first layer only
        ParallelPlan(recompute="full", recompute_method="block", recompute_num_layers=1): CALL[p]
        + SAVED_PER_RECORDED_OP * recorded * TENSOR[p],
        ParallelPlan(): 0.0,
    }
    for plan, want in cases.items():
        got = checkpoint_hooks_s(TINY, rates, plan, range(4), kinds, backward=backward)
        assert got == pytest.approx(want), plan.label()


def test_without_the_probe_every_hook_is_in_the_backward():
    profile = cpu_profile()
    rates = host_rates(profile)
    kinds = {False: _layer(profile, rates, ParallelPlan())}
    plan = ParallelPlan(recompute="selective")
    assert checkpoint_hooks_s(TINY, rates, plan, range(4), kinds, backward=False) == 0.0
    got = checkpoint_hooks_s(TINY, rates, plan, range(4), kinds, backward=True)
    # fixture: 50 µs per call, 15 µs per saved tensor
    assert got == pytest.approx(4 * (50e-6 + SDPA_SAVED_TENSORS * 15e-6))


def test_the_forward_pays_its_hooks_and_the_recompute_the_rest():
    profile, rates = rates_with()
    groups = comm_groups(plan_placements(profile, ParallelPlan(), RankPacking(gpus_per_node=4)))

    def passes(plan):
        return executor_pass_costs(TINY, JOB, plan, profile, rates, groups, 0, 0)

    forward, _, none = passes(ParallelPlan())
    assert none.compute_s == 0.0
    layer = _layer(profile, rates, ParallelPlan())
    rerun = host_seconds(layer.forward, rates, backward=False)
    recorded = layer.forward.ops + layer.forward.dt_ops
    saved = SAVED_PER_RECORDED_OP * recorded
    f_full, _, r_full = passes(ParallelPlan(recompute="full"))
    assert f_full.compute_s - forward.compute_s == pytest.approx(
        4 * (CALL["forward"] + saved * TENSOR["forward"])
    )
    assert r_full.compute_s == pytest.approx(
        4 * (rerun + CALL["backward"] + saved * TENSOR["backward"])
    )
    f_sel, _, r_sel = passes(ParallelPlan(recompute="selective"))
    assert f_sel.compute_s - forward.compute_s == pytest.approx(
        4 * (CALL["forward"] + SDPA_SAVED_TENSORS * TENSOR["forward"])
    )
    assert 4 * (CALL["backward"] + SDPA_SAVED_TENSORS * TENSOR["backward"]) < r_sel.compute_s
