"""The chunks of one plan share their `layer_ops` (`costmodel.runtimes.torch.passes.chunk_ops`,
``layer_kinds``): every chunk's pass costs equal those priced without the shared cache."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel.passes import comm_groups
from costmodel.runtimes.torch.passes import executor_pass_costs
from costmodel.runtimes.torch.rates import host_rates
from costmodel.scale_up import RankPacking
from costmodel.topology import plan_placements
from profiles import load_profile
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset

PROFILE = load_profile("h100-sxm-80gb")
RATES = host_rates(PROFILE)
JOB = TrainingJob(seq_length=128, global_batch_size=16, precision="bf16")


@settings(max_examples=25, deadline=None)
@given(
    name=st.sampled_from(["tiny", "tiny-moe"]),
    tp=st.sampled_from([1, 2]),
    pp=st.sampled_from([1, 2]),
    vpp=st.sampled_from([1, 2]),
    mbs=st.sampled_from([1, 2]),
    recompute=st.sampled_from(["none", "selective", "full"]),
)
def test_shared_layer_kinds_price_every_chunk_as_without(name, tp, pp, vpp, mbs, recompute):
    model = get_preset(name)
    plan = ParallelPlan(
        tp=tp,
        pp=pp,
        vpp=vpp if pp > 1 else 1,
        micro_batch_size=mbs,
        recompute=recompute,
        sequence_parallel=tp > 1,
    )
    groups = comm_groups(plan_placements(PROFILE, plan, RankPacking(gpus_per_node=8)))
    shared: dict = {}
    for stage in range(plan.pp):
        for chunk in range(plan.vpp):
            args = (model, JOB, plan, PROFILE, RATES, groups, stage, chunk)
            assert executor_pass_costs(*args, shared) == executor_pass_costs(*args)
    assert set(shared) == set(model.moe_layer_mask())
