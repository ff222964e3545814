"""The executor model's collectives in the simulated step (`costmodel.runtimes.torch`
through `costmodel.iteration.simulate_iteration`): the timeline's context-parallel
gathers, and the typical excess, ranks' drift, functional, autograd and redistribution
extras each kind of collective pays."""

from __future__ import annotations

import pytest

from costmodel.estimate import simulate_plan
from costmodel.execution_presets import TORCH_OPTIONS
from costmodel.runtimes.torch.rates import host_rates
from specs.plan import ParallelPlan
from tests.costmodel.cpu_fixture import cpu_profile, spread, spread_over_fit
from tests.costmodel.torch_fixture import CPU, JOB, MOE, TINY, cluster, sim


def test_the_executor_timeline_all_gathers_context_parallel_keys():
    plan = ParallelPlan(cp=2, cp_comm_type="p2p")  # the executor gathers whatever the plan says
    _, timeline = simulate_plan(TINY, cluster(2), JOB, plan, CPU, options=TORCH_OPTIONS)
    cp = [e for e in timeline.events if e.lane == "cp"]
    assert cp and {e.kind for e in cp} == {"all_gather"}


def test_pipeline_sends_and_collectives_pay_the_typical_excess():
    extra = (
        spread_over_fit("send_recv", 65536, 500e-6),
        spread_over_fit("all_reduce", 65536, 1000e-6),
    )
    noisy = cpu_profile(extra=extra)
    plain = sim(ParallelPlan(pp=2))
    waited = sim(ParallelPlan(pp=2), profile=noisy)
    assert waited.send_s[0] - plain.send_s[0] == pytest.approx(500e-6)
    tp = ParallelPlan(tp=2)
    a = sim(tp)
    b = sim(tp, profile=noisy)
    # 2 all-reduces forward and 5 backward per layer, 1 + 1 in embedding and head, per
    # microbatch: each waits 1 ms more.
    per_mb = 4 * 7 + 2
    extra_tp = b.breakdown.tp_exposed_s - a.breakdown.tp_exposed_s
    assert extra_tp == pytest.approx(8 * per_mb * 1e-3, rel=1e-6)


def _tp_extra_and_dp_times(profile) -> tuple[float, float, float]:
    """tp2's exposed TP time on ``profile`` beyond the fixture's, and dp2's iteration time
    on the fixture and on ``profile``."""

    tp, dp = ParallelPlan(tp=2), ParallelPlan(dp=2)
    extra = sim(tp, profile=profile).breakdown.tp_exposed_s - sim(tp).breakdown.tp_exposed_s
    return extra, sim(dp).iteration_time_s, sim(dp, profile=profile).iteration_time_s


def test_functional_collectives_pay_the_measured_extra_per_call():
    slower = cpu_profile(extra=(spread("op_overhead.functional_all_reduce", 300e-6),))
    extra_tp, dp_base, dp_slower = _tp_extra_and_dp_times(slower)
    # every TP all-reduce is a DTensor redistribution: 30 per microbatch (above), 8 of them
    assert extra_tp == pytest.approx(8 * (4 * 7 + 2) * 300e-6, rel=1e-6)
    # DDP's bucket all-reduces are plain calls: no extra
    assert dp_slower == pytest.approx(dp_base)


def test_moe_token_exchanges_pay_the_autograd_exchange_not_the_functional_extra():
    plan = ParallelPlan(dp=2, ep=2)
    functional = cpu_profile(extra=(spread("op_overhead.functional_all_to_all", 300e-6),))
    autograd = cpu_profile(extra=(spread("op_overhead.autograd_all_to_all", 1e-3),))
    base = sim(plan, MOE)
    a = sim(plan, MOE, profile=functional)
    b = sim(plan, MOE, profile=autograd)
    per_step = plan.num_microbatches(JOB.global_batch_size) * MOE.num_layers
    # an older profile: each exchange costs two functional calls (the fallback)
    assert a.breakdown.ep_exposed_s - base.breakdown.ep_exposed_s == pytest.approx(
        per_step * 2 * 2 * 300e-6, rel=1e-6
    )
    # a measured exchange: half of it in each pass, two exchanges per layer
    assert b.breakdown.ep_exposed_s - base.breakdown.ep_exposed_s == pytest.approx(
        per_step * 2 * 1e-3, rel=1e-6
    )


def test_layer_collectives_wait_for_the_ranks_drift_and_ddp_reductions_not():
    drift = cpu_profile(extra=(spread("op_overhead.sync_wait", 2e-3),))
    extra_tp, dp_base, dp_drift = _tp_extra_and_dp_times(drift)
    # the fixture has no collective sweep points: every layer collective pays the drift;
    # per microbatch the 30 all-reduces and the head's all-gather above
    assert extra_tp == pytest.approx(8 * (4 * 7 + 2 + 1) * 2e-3, rel=1e-6)
    assert dp_drift == pytest.approx(dp_base)


def test_tensor_parallel_collectives_pay_the_redistribution_extra_and_context_parallel_not():
    # op_overhead.add is the profile's dispatch here (scale 1); the DTensor operator and
    # to_local the layers already count are taken out of the measured 400 µs
    extra = (
        spread("op_overhead.redistribute_all_reduce", 400e-6),
        spread("op_overhead.redistribute_all_gather", 400e-6),
        spread("op_overhead.redistribute_reduce_scatter", 400e-6),
    )
    slower = cpu_profile(extra=extra)
    rates = host_rates(slower)
    net = 400e-6 - rates.dtensor_forward_s - rates.dtensor_to_local_s
    assert rates.redistribute_s("all_reduce") == pytest.approx(net)
    assert rates.redistribute_s("all_to_all") == 0.0  # never a redistribution
    tp = ParallelPlan(tp=2)
    a = sim(tp)
    b = sim(tp, profile=slower)
    extra_tp = b.breakdown.tp_exposed_s - a.breakdown.tp_exposed_s
    # per microbatch the 30 all-reduces above and the head's all-gather of the logits
    assert extra_tp == pytest.approx(8 * (4 * 7 + 2 + 1) * net, rel=1e-6)
    # context parallelism gathers K and V with the executor's own functional calls
    cp = ParallelPlan(cp=2)
    c = sim(cp)
    d = sim(cp, profile=slower)
    assert d.iteration_time_s == pytest.approx(c.iteration_time_s)
