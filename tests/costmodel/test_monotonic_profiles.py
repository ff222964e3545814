"""A slower machine never makes a plan faster (`test_monotonic`) on the GB200 NVL72, GB300
NVL72, B300 and A100 profiles: EP and TP groups of more than 8 GPUs inside one NVLink
domain, EP and DP groups across two racks, TP communication overlap with mxfp8, both
token dispatchers with the 1F1B all-to-all overlap, and the A100's all-reduce fits with
measured points (docs/cost-model.md, "Monotonicity in the profile's rates")."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from specs.plan import ParallelPlan
from tests.costmodel.monotonic_fixture import (
    A100,
    B300,
    DENSE,
    EP16,
    GB200,
    GB300,
    INTERLEAVED_TP_OVERLAP,
    MHA,
    MOE,
    ROUTER,
    Case,
    check_rate,
    draws,
    moe_plan,
    opts,
)

CASES = (
    Case(  # EP 32 over 8 trays of one NVLink domain
        model=MOE,
        plan=ParallelPlan(pp=1, ep=32, dp=32, distributed_optimizer=True),
        options=opts(moe_dispatcher="flex", moe_a2a_overlap=True),
        global_batch_size=256,
        profile=GB200,
    ),
    Case(
        model=MOE,
        plan=ParallelPlan(pp=2, ep=32, dp=32, distributed_optimizer=True),
        options=opts(moe_dispatcher="alltoall", fp8_recipe="mxfp8"),
        precision="fp8",
        global_batch_size=256,
        profile=GB200,
    ),
    Case(  # TP 16 over 4 trays: userbuffers and the MXFP8 scale gathers inside the domain
        model=MHA,
        plan=ParallelPlan(tp=16, dp=2, sequence_parallel=True, tp_comm_overlap=True),
        options=opts(fp8_recipe="mxfp8"),
        precision="fp8",
        seq_length=2048,
        profile=GB200,
    ),
    Case(  # EP 128: ranks 0-71 in one rack, 72-127 in the next
        model=MOE,
        plan=ParallelPlan(pp=1, ep=128, dp=128, distributed_optimizer=True),
        options=opts(moe_dispatcher="flex"),
        global_batch_size=256,
        profile=GB200,
    ),
    Case(  # TP 4 x DP 18 per rack, the pipeline hop between the two racks
        model=DENSE,
        plan=ParallelPlan(
            tp=4,
            pp=2,
            dp=18,
            sequence_parallel=True,
            distributed_optimizer=True,
            overlap_grad_reduce=True,
            overlap_param_gather=True,
        ),
        global_batch_size=144,
        profile=GB200,
    ),
    Case(  # EP 64 inside the domain
        model=MOE,
        plan=ParallelPlan(pp=1, ep=64, dp=64, distributed_optimizer=True),
        options=opts(moe_dispatcher="flex", moe_a2a_overlap=True, fp8_recipe="mxfp8"),
        precision="fp8",
        global_batch_size=256,
        profile=GB300,
    ),
    Case(
        model=DENSE,
        plan=ParallelPlan(tp=8, pp=2, dp=2, sequence_parallel=True, tp_comm_overlap=True),
        options=opts(fp8_recipe="mxfp8"),
        precision="fp8",
        profile=GB300,
    ),
    Case(  # EP 128 across two racks, 1F1B all-to-all overlap
        model=MOE,
        plan=ParallelPlan(pp=1, ep=128, dp=128),
        options=opts(moe_dispatcher="alltoall", moe_a2a_overlap=True),
        global_batch_size=256,
        profile=GB300,
    ),
    Case(  # EP 64 inside the domain, pp 2 x vpp 2 on 128 GPUs (rank 0's groups priced)
        model=MOE,
        plan=moe_plan(ep=64, dp=64),
        options=opts(moe_dispatcher="alltoall", moe_a2a_overlap=True),
        global_batch_size=256,
        profile=GB300,
    ),
    Case(
        model=DENSE,
        plan=INTERLEAVED_TP_OVERLAP,
        options=opts(fp8_recipe="mxfp8"),
        precision="fp8",
        profile=B300,
    ),
    Case(
        model=MOE,
        plan=EP16,
        options=opts(moe_dispatcher="flex", moe_a2a_overlap=True),
        profile=B300,
    ),
    Case(
        model=DENSE,
        plan=ParallelPlan(tp=8, pp=2, dp=1, sequence_parallel=True, recompute="selective"),
        global_batch_size=64,
        profile=A100,
    ),
    Case(
        model=MOE,
        plan=moe_plan(),
        options=opts(moe_dispatcher="alltoall", moe_a2a_overlap=True, cuda_graph_scopes=ROUTER),
        profile=A100,
    ),
    Case(
        model=DENSE,
        plan=ParallelPlan(tp=2, cp=2, dp=4, distributed_optimizer=True, overlap_grad_reduce=True),
        profile=A100,
    ),
)
"""Plans on the GB200 NVL72, GB300 NVL72, B300 and A100 profiles."""


@settings(max_examples=600, deadline=None, derandomize=True)
@given(**draws(CASES))
def test_a_slower_rate_never_speeds_up_a_plan(index: int, rate: str, factor: float):
    check_rate(CASES, index, rate, factor)


@pytest.mark.parametrize(
    ("index", "rate"),
    [
        # GB300, ep 64 of pp 2 x vpp 2 with the all-to-all overlap: the forward's token-count
        # all-gather against the host floor of the merged step.
        (8, "all_gather:intra"),
        (8, "all_gather:intra:latency"),
        # A100: the loss and gradient all-reduces, priced by fits with measured points.
        (11, "all_reduce:intra"),
        (12, "all_reduce:intra:latency"),
    ],
)
def test_a_slower_collective_never_speeds_up_these_plans(index: int, rate: str):
    check_rate(CASES, index, rate, 0.5)
