"""A slower machine never makes a plan faster: scaling one rate of a profile down (a
collective's bandwidth, the GEMM or attention throughput, HBM bandwidth, the host launch
rate) or one latency up (a collective's latency within or across nodes, one host launch
latency) never lowers `estimate_plan`'s iteration seconds, and the opposite change never
raises them, for dense and MoE plans over tp / pp / vpp / cp / ep / dp, both token
dispatchers with and without the 1F1B all-to-all overlap, the distributed optimizer, TP
communication overlap, recompute and fp8, on the H100 profile and on the B200 profile (fp8
delayed and mxfp8, both dispatchers) (docs/cost-model.md, "Monotonicity in the profile's
rates"). The other GPU profiles: `test_monotonic_profiles`."""

from __future__ import annotations

from hypothesis import given, settings

from specs.plan import ParallelPlan
from tests.costmodel.monotonic_fixture import (
    B200,
    DENSE,
    EP16,
    INTERLEAVED_TP_OVERLAP,
    MLA_MOE,
    MOE,
    ROUTER,
    TOKEN_DROP,
    Case,
    check_rate,
    draws,
    moe_plan,
    opts,
)

CASES = (
    Case(model=DENSE, plan=ParallelPlan(tp=2, pp=2, dp=4, sequence_parallel=True)),
    Case(model=DENSE, plan=INTERLEAVED_TP_OVERLAP),
    Case(
        model=DENSE,
        plan=ParallelPlan(
            tp=2,
            cp=2,
            dp=4,
            distributed_optimizer=True,
            overlap_grad_reduce=True,
            overlap_param_gather=True,
        ),
    ),
    Case(model=DENSE, plan=ParallelPlan(tp=1, pp=4, dp=4, recompute="full")),
    Case(
        model=DENSE,
        plan=ParallelPlan(tp=2, pp=2, dp=4, sequence_parallel=True, recompute="selective"),
        precision="fp8",
    ),
    Case(model=MOE, plan=moe_plan(), options=opts(moe_dispatcher="alltoall")),
    Case(
        model=MOE,
        plan=moe_plan(),
        options=opts(moe_dispatcher="alltoall", moe_a2a_overlap=True),
    ),
    Case(
        model=MOE,
        plan=moe_plan(),
        options=opts(moe_dispatcher="flex", moe_a2a_overlap=True),
    ),
    Case(
        model=MOE,
        plan=moe_plan(distributed_optimizer=True),
        options=opts(moe_dispatcher="flex", moe_a2a_overlap=True, cuda_graph_scopes=ROUTER),
    ),
    Case(
        model=MOE,
        plan=moe_plan(),
        options=opts(moe_dispatcher="alltoall", moe_a2a_overlap=True, cuda_graph_scopes=ROUTER),
    ),
    Case(
        model=MOE,
        plan=EP16,
        options=opts(moe_dispatcher="flex"),
    ),
    Case(
        model=MOE,
        plan=EP16,
        options=opts(moe_dispatcher="flex", moe_a2a_overlap=True),
    ),
    Case(
        model=TOKEN_DROP,
        plan=moe_plan(),
        options=opts(moe_dispatcher="flex", moe_a2a_overlap=True),
    ),
    Case(
        model=MLA_MOE,
        plan=moe_plan(vpp=3, distributed_optimizer=True),
        options=opts(moe_dispatcher="flex", moe_a2a_overlap=True, cuda_graph_scopes=ROUTER),
    ),
    Case(
        model=MOE,
        plan=ParallelPlan(tp=2, ep=4, etp=2, dp=8, sequence_parallel=True),
        options=opts(moe_dispatcher="alltoall"),
    ),
    Case(
        model=MOE,
        plan=ParallelPlan(pp=2, ep=8, dp=8, recompute="full"),
        options=opts(moe_dispatcher="flex", moe_a2a_overlap=True),
    ),
    Case(
        model=MOE,
        plan=ParallelPlan(tp=2, pp=1, ep=8, dp=8, sequence_parallel=True, recompute="selective"),
        options=opts(moe_dispatcher="alltoall", moe_a2a_overlap=True),
        precision="fp8",
    ),
    Case(
        model=DENSE,
        plan=ParallelPlan(tp=2, pp=2, dp=4, sequence_parallel=True, tp_comm_overlap=True),
        precision="fp8",
        profile=B200,
    ),
    Case(
        model=DENSE,
        plan=ParallelPlan(tp=2, cp=2, dp=4, sequence_parallel=True, recompute="selective"),
        options=opts(fp8_recipe="mxfp8"),
        precision="fp8",
        profile=B200,
    ),
    Case(
        model=DENSE,
        plan=ParallelPlan(tp=1, pp=4, vpp=2, schedule="interleaved", dp=4, recompute="full"),
        profile=B200,
    ),
    Case(
        model=MOE,
        plan=moe_plan(distributed_optimizer=True),
        options=opts(moe_dispatcher="flex", moe_a2a_overlap=True, fp8_recipe="mxfp8"),
        precision="fp8",
        profile=B200,
    ),
    Case(
        model=MOE,
        plan=EP16,
        options=opts(moe_dispatcher="flex"),
        profile=B200,
    ),
    Case(
        model=MOE,
        plan=moe_plan(),
        options=opts(moe_dispatcher="alltoall", moe_a2a_overlap=True, cuda_graph_scopes=ROUTER),
        profile=B200,
    ),
)


@settings(max_examples=1000, deadline=None, derandomize=True)
@given(**draws(CASES))
def test_a_slower_rate_never_speeds_up_a_plan(index: int, rate: str, factor: float):
    check_rate(CASES, index, rate, factor)
