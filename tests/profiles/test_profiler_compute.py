"""The compute sweep: GEMM operands rotate through sets beyond a core's L2, the memory
sweep times a transposing copy (profiles.profiler.compute), and every point is visited in
passes whose samples pool (profiles.profiler.compute_sweep)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from profiles.profiler.compute import (
    COLD_POOL_BYTES,
    MAX_OPERAND_SETS,
    NORM_WIDTH,
    TRANSPOSE_WIDTH,
    cold_rmsnorm,
    gemm_operands,
    operand_sets,
    time_attention,
    time_memory_ops,
    time_overheads,
)
from profiles.profiler.compute_sweep import compute_point_count, pooled, run_compute_sweep
from profiles.profiler.run import runs_host_probes
from profiles.profiler.shapes import SweepPlan
from profiles.profiler.timing import WALL_CLOCK, Budget, GemmTiming, per_pass
from profiles.profiler.transcendental import (
    KERNELS,
    TRANSCENDENTAL_ELEMENTS,
    cold_transcendental,
    time_transcendental,
)
from profiles.schema_host import TRANSCENDENTAL_OPS
from tests.profiles.test_profiler_framework import RUN


def test_small_gemms_rotate_through_enough_operand_sets_to_leave_the_cache():
    one_set = (32 * 128 + 128 * 128) * 4  # fp32 32x128 input and 128x128 weight
    sets = operand_sets(RUN, one_set)
    assert sets * one_set >= COLD_POOL_BYTES > (sets - 1) * one_set
    assert operand_sets(RUN, 64 << 20) == 1  # one set is already beyond the pool
    assert operand_sets(RUN, 16) == MAX_OPERAND_SETS


def test_each_gemm_call_takes_the_next_operand_set():
    call = gemm_operands(RUN, ("fp32", 32, 128, 128, "linear"))
    sets = operand_sets(RUN, (32 * 128 + 128 * 128) * 4)
    first = [call() for _ in range(sets)]
    assert not torch.equal(first[0], first[1])
    assert torch.equal(call(), first[0])  # back to the first set after a full turn
    assert first[0].shape == (32, 128)


def test_wgrad_and_dgrad_patterns_keep_their_layouts():
    wgrad = gemm_operands(RUN, ("fp32", 64, 32, 16, "wgrad"))()
    dgrad = gemm_operands(RUN, ("fp32", 64, 32, 16, "dgrad"))()
    assert wgrad.shape == dgrad.shape == (64, 32)


def test_the_memory_sweep_times_a_transposing_copy():
    elements = 64 * TRANSPOSE_WIDTH
    records = {r.op: r for r in time_memory_ops(RUN, elements, "fp32")}
    assert set(records) == {"copy", "add", "rmsnorm", "transpose"}
    assert records["transpose"].bytes_moved == 2 * elements * 4
    assert all(t > 0 for t in records["transpose"].times_s)


def test_the_rmsnorm_point_reads_cold_inputs_and_writes_fresh_outputs():
    # A step's element-wise operators read activations written operators earlier and write
    # fresh ones that are held for the backward: the point rotates its inputs over the cold
    # pool and holds each output for a whole turn, so no call reuses the block just freed.
    elements = 16 * NORM_WIDTH
    sets = operand_sets(RUN, elements * 4)
    assert sets > 1
    call = cold_rmsnorm(RUN, elements, "fp32")
    # The test keeps no output: only the point's own hold keeps the blocks apart.
    addresses = [call().data_ptr() for _ in range(2 * sets)]
    assert len(set(addresses[:sets])) == sets
    values = [call() for _ in range(sets + 1)]
    assert not torch.equal(values[0], values[1])  # a different input each call
    assert torch.equal(values[sets], values[0])  # back to the first after a full turn
    assert values[0].shape == (16, NORM_WIDTH)


def test_attention_points_rotate_through_operand_sets(monkeypatch):
    sdpa = torch.nn.functional.scaled_dot_product_attention
    queries = []

    def recorded(q, *args, **kwargs):
        queries.append(q.data_ptr())
        return sdpa(q, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recorded)
    forward, backward = time_attention(RUN, ("fp32", 1, 2, 32, 16))
    sets = operand_sets(RUN, 3 * 2 * 32 * 16 * 4)
    assert sets > 1
    assert len(set(queries)) == sets  # every set is used, none beyond them
    assert forward.direction == "forward" and backward.direction == "backward"
    assert all(t > 0 for t in forward.times_s + backward.times_s)


def _tiny_plan(**overrides) -> SweepPlan:
    fields = dict(
        primary_dtype="fp32",
        gemms=(("fp32", 32, 32, 32, "linear"), ("fp32", 4096, 4096, 4096, "linear")),
        misaligned_gemms=((("fp32", 32, 32, 32, "linear"), ("fp32", 33, 32, 32, "linear")),),
        alignment_elements=32,
        attention=(("fp32", 1, 2, 32, 16),),
        memory_elements=(1024, 1 << 40),
        adamw_params=(256,),
        message_bytes=(),
        max_call_s=0.05,
    )
    return SweepPlan(**(fields | overrides))


def test_every_kept_point_pools_the_samples_of_every_pass():
    plan = _tiny_plan()
    labels: list[str] = []
    results = run_compute_sweep(plan, RUN, labels.append, memory_limit_bytes=1 << 30, passes=3)
    # 7 points of the plan and the transcendental kernels at their 3 sizes (a CPU rank's)
    assert len(labels) == compute_point_count(plan, 3) == 1 + 3 * (7 + 3)
    visit = per_pass(RUN.budget, 3)
    fewest = 3 * visit.min_repeats
    (gemm,) = results.gemms  # the 4096^3 product is predicted over max_call_s
    assert (gemm.m, gemm.n, gemm.k) == (32, 32, 32) and len(gemm.times_s) >= fewest
    assert [(a.m, b.m) for a, b in results.misaligned] == [(32, 33)]
    assert all(len(r.times_s) >= fewest for pair in results.misaligned for r in pair)
    assert sorted(r.direction for r in results.attention) == ["backward", "forward"]
    assert sorted(r.op for r in results.memory) == ["adamw", "add", "copy", "rmsnorm", "transpose"]
    assert all(len(r.times_s) >= fewest for r in results.attention + results.memory)
    assert len(results.transcendental) == 3 * len(TRANSCENDENTAL_OPS)
    assert all(len(r.times_s) >= fewest for r in results.transcendental)
    assert len(results.skipped) == 2, results.skipped
    assert any("4096x4096x4096" in s and "per call" in s for s in results.skipped)
    assert any("(memory)" in s for s in results.skipped)


def test_a_pass_splits_the_budget_but_keeps_the_warmup():
    budget = Budget(warmup_calls=2, min_repeats=5, max_repeats=15, target_s=0.06, min_sample_s=1e-3)
    share = per_pass(budget, 3)
    assert (share.warmup_calls, share.min_repeats, share.max_repeats) == (2, 2, 5)
    assert share.target_s == pytest.approx(0.02) and share.min_sample_s == 1e-3
    assert per_pass(budget, 1) == budget


def test_pooling_refuses_records_of_another_point():
    a = GemmTiming(dtype="fp32", m=8, n=8, k=8, pattern="linear", times_s=(1.0,))
    b = GemmTiming(dtype="fp32", m=8, n=8, k=16, pattern="linear", times_s=(2.0,))
    assert pooled((a,), (a,))[0].times_s == (1.0, 1.0)
    with pytest.raises(ValueError, match="different records"):
        pooled((a,), (b,))


def test_the_host_probes_run_on_cpu_ranks_only() -> None:
    assert runs_host_probes(torch.device("cpu"))
    assert not runs_host_probes(torch.device("cuda", 0))


def test_the_autograd_host_probes_run_only_where_asked() -> None:
    with_chain = [r.op for r in time_overheads(RUN)]
    assert with_chain == ["add", "autograd_forward", "autograd_backward"]
    assert [r.op for r in time_overheads(RUN, autograd=False)] == ["add"]  # a GPU rank's


def test_a_gpu_rank_times_no_transcendental_kernels():
    plan = _tiny_plan()
    assert compute_point_count(plan, 1, host_probes=False) == 1 + 7
    results = run_compute_sweep(
        plan, RUN, lambda _: None, memory_limit_bytes=1 << 30, passes=1, host_probes=False
    )
    assert results.transcendental == []


def test_the_transcendental_kernels_are_those_autograd_runs():
    # The probe's kernels compute what the executor's silu and loss run forward and backward.
    x = torch.randn(4, NORM_WIDTH, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(4, NORM_WIDTH, dtype=torch.float64)
    assert tuple(KERNELS) == TRANSCENDENTAL_OPS
    for op, fn in (("silu", torch.nn.functional.silu), ("log_softmax", torch.log_softmax)):
        y = fn(x, dim=-1) if op == "log_softmax" else fn(x)
        (dx,) = torch.autograd.grad(y, x, dy)
        assert torch.allclose(KERNELS[op](x.detach(), dy), y)
        source = y.detach() if op == "log_softmax" else x.detach()
        assert torch.allclose(KERNELS[f"{op}_backward"](source, dy), dx)


def test_the_transcendental_probe_reads_cold_inputs_and_returns_sane_figures():
    elements = 16 * NORM_WIDTH
    sets = operand_sets(RUN, 2 * elements * 4)
    assert sets > 1
    call = cold_transcendental(RUN, "silu", elements)
    addresses = [call().data_ptr() for _ in range(sets)]
    assert len(set(addresses)) == sets  # fresh outputs, held for a whole turn
    small, large = TRANSCENDENTAL_ELEMENTS[0], TRANSCENDENTAL_ELEMENTS[-1]
    for records in (time_transcendental(RUN, small), time_transcendental(RUN, large)):
        assert tuple(r.op for r in records) == TRANSCENDENTAL_OPS
        # positive, and below 100 ns per element (a CPU core runs ~1 ns per element)
        assert all(0 < t < 100e-9 * r.elements + 1e-3 for r in records for t in r.times_s)
    # 16x the elements cost more: fastest samples of wall time (a thread's CPU clock may
    # tick too coarsely on a virtual machine for a test's short samples)
    wall = dataclasses.replace(RUN, clock=WALL_CLOCK)
    fast = {r.op: min(r.times_s) for r in time_transcendental(wall, small)}
    slow = {r.op: min(r.times_s) for r in time_transcendental(wall, large)}
    assert all(slow[op] > fast[op] for op in TRANSCENDENTAL_OPS)
