"""Gradient synchronization and the optimizer step of the executor model
(`costmodel.runtimes.torch.sync`): DDP buckets, FSDP2 gathers and reductions, AdamW's
host and byte costs, and expert parallelism's token exchange."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.runtimes.torch.host_rate_fits import FSDP_PROBE_BYTES
from costmodel.runtimes.torch.ops import FP32
from costmodel.runtimes.torch.sync import fsdp_gather_s, fsdp_reduce, optimizer_s, stage_layout
from costmodel.scale_up import RankPacking
from costmodel.topology import plan_placements
from specs.plan import ParallelPlan
from tests.costmodel.torch_fixture import CPU, MOE, RATES, TINY, chunks, sim


def test_ddp_buckets_all_hold_the_plans_bucket_size():
    # The executor passes bucket_cap_mb, so torch 2.13's BucketCapacityConfig caps the first
    # bucket at bucket_cap_mb too (the 1 MiB first bucket only applies when it is unset).
    plan = ParallelPlan(dp=2, ddp_bucket_size=100_000)
    tail = sim(plan).tails[0]
    sizes = [e[3] for e in tail.dp_events]
    params = stage_layout(TINY, plan, 0).dense
    assert sizes[0] == sizes[1] == 100_000 * FP32
    assert sum(sizes) == pytest.approx(params * FP32)
    one = sim(ParallelPlan(dp=2)).tails[0]
    assert len(one.dp_events) == 1  # the whole model fits under the 40M default


def test_tensor_parallel_data_parallel_uses_the_bucketed_all_reduce():
    plan = ParallelPlan(tp=2, dp=2)
    tail = sim(plan).tails[0]
    assert tail.dp_events and all("dense" in e[0] for e in tail.dp_events)


def idle_gather_s(profile, rates, params, tensors, group):
    """A gather priced from the idle module's figures (no in-context probe)."""
    return fsdp_gather_s(profile, rates, params, tensors, group, host_s=0.0, backward=False)


def test_fsdp_gathers_every_module_every_microbatch():
    base = chunks(ParallelPlan(dp=2))[0][0]
    fsdp = chunks(ParallelPlan(dp=2, distributed_optimizer=True))[0][0]
    placements = plan_placements(
        CPU, ParallelPlan(dp=2, distributed_optimizer=True), RankPacking(gpus_per_node=4)
    )
    params = stage_layout(TINY, ParallelPlan(dp=2), 0)
    blocks, root = params.blocks[:-1], params.blocks[-1]
    group = placements["dp-cp"]
    per_block = [idle_gather_s(CPU, RATES, p, 9, group) for p in blocks]
    expected = sum(per_block) + idle_gather_s(CPU, RATES, root, 3, group)
    assert fsdp.forward.compute_s - base.forward.compute_s == pytest.approx(expected)
    # pp = 1: every module reshards after forward and gathers again in backward.
    assert fsdp.backward.compute_s - base.backward.compute_s == pytest.approx(expected)
    one = idle_gather_s(CPU, RATES, 1000, 1, group)
    # The profile's module figure already holds a gather of FSDP_PROBE_BYTES (latency
    # included): only the bytes beyond it are added.
    assert one == pytest.approx(
        400e-6 + 3 * 1000 * FP32 / 50e9 + (1000 * FP32 - FSDP_PROBE_BYTES) * 0.5 / 0.8e9
    )
    # Each further tensor of a module adds the profile's per-tensor figure (fixture: 30 us).
    three = idle_gather_s(CPU, RATES, 1000, 3, group)
    assert three - one == pytest.approx(2 * 30e-6)
    # The module figure is a typical (median) call: a waited gather also pays the sweep's
    # typical excess of its op, as every waited collective does.
    waited = dataclasses.replace(RATES, collective_excess=(("all_gather", 2, 0.4e-3),))
    assert idle_gather_s(CPU, waited, 1000, 1, group) == pytest.approx(one + 0.4e-3)
    waited = dataclasses.replace(RATES, collective_excess=(("reduce_scatter", 2, 1.5e-3),))
    plain_reduce = fsdp_reduce(CPU, RATES, 1000, 1, group, "r")
    assert fsdp_reduce(CPU, waited, 1000, 1, group, "r").comm_s == pytest.approx(
        plain_reduce.comm_s + 1.5e-3
    )
    piped = chunks(ParallelPlan(pp=2, distributed_optimizer=True, dp=2))
    assert piped[0][0].backward.compute_s == pytest.approx(
        chunks(ParallelPlan(pp=2, dp=2))[0][0].backward.compute_s
    )


def test_optimizer_pays_dtensor_dispatch_and_sequence_parallel_norm_reads():
    plain = ParallelPlan()
    placements = plan_placements(CPU, plain, RankPacking(gpus_per_node=4))
    params = stage_layout(TINY, plain, 0)
    tensors = params.dense_tensors
    base = optimizer_s(CPU, RATES, plain, params, placements)
    expected = tensors * (80e-6 + 2e-6) + 28 * params.dense / 10e9
    assert base == pytest.approx(expected)
    tp = ParallelPlan(tp=2)
    tp_params = stage_layout(TINY, tp, 0)
    tp_s = optimizer_s(
        CPU, RATES, tp, tp_params, plan_placements(CPU, tp, RankPacking(gpus_per_node=4))
    )
    sp = ParallelPlan(tp=2, sequence_parallel=True)
    sp_s = optimizer_s(
        CPU, RATES, sp, tp_params, plan_placements(CPU, sp, RankPacking(gpus_per_node=4))
    )
    # The DTensor AdamW figure per tensor, the local (half-width) bytes, and the step-end
    # loss all-reduce over the two ranks.
    loss = 400e-6 + 4 * 1.0 / 1.5e9
    dtensor = tensors * (700e-6 + 2e-6) + 28 * tp_params.dense / 10e9
    assert tp_s == pytest.approx(dtensor + loss)
    # 9 norm weights, 3 all-reduces each, of 128 fp32 over the tp pair.
    assert sp_s - tp_s == pytest.approx(27 * (400e-6 + 128 * 4 * 1.0 / 1.5e9), rel=1e-6)


def test_expert_parallel_exchanges_tokens():
    s = sim(ParallelPlan(dp=2, ep=2), model=MOE)
    assert s.breakdown.ep_exposed_s > 0
    assert sim(ParallelPlan(), model=MOE).breakdown.ep_exposed_s == 0
