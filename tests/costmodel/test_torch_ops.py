"""Operator counts and host prices of the executor model (costmodel.runtimes.torch.host_rates,
costmodel.runtimes.torch.ops, costmodel.runtimes.torch.layers, costmodel.runtimes.torch.moe)."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.compute import gemm_time_s
from costmodel.estimate import estimate_plan
from costmodel.execution_presets import TORCH_OPTIONS
from costmodel.plan_frame import plans_frame
from costmodel.runtimes.torch.host_rate_fits import DTENSOR_FALLBACK_RATIOS
from costmodel.runtimes.torch.layers import (
    attention_block,
    attention_core,
    embedding_ops,
    head_ops,
    layer_ops,
    moe_ffn,
)
from costmodel.runtimes.torch.ops import FP32, HostOps, host_seconds, linear, rms_norm, rope
from costmodel.runtimes.torch.rates import host_rates
from costmodel.runtimes.torch.shapes import rank_shape
from costmodel.runtimes.torch.transcendental_rates import NO_TRANSCENDENTAL
from costmodel.screen import screen_plans
from profiles.schema_host import TRANSCENDENTAL_OPS, HostTranscendental
from profiles.schema_provenance import MeasurementSpread
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from tests.costmodel.cpu_fixture import (
    ADAMW_BPS,
    ADAMW_TENSOR_S,
    OVERHEADS_S,
    cpu_profile,
    spread,
    spread_over_fit,
)

CPU = cpu_profile()
RATES = host_rates(CPU)
TINY = get_preset("tiny")
MOE = get_preset("tiny-moe")


def shape(**plan):
    return rank_shape(ParallelPlan(**plan), 128, 8)


def count(comms, op):
    return sum(c.count for c in comms if c.op == op)


# ---- host rates -------------------------------------------------------------------------


def test_rates_come_from_the_profile_spreads():
    assert RATES.dispatch_s == 2e-6
    assert RATES.forward_op_s == OVERHEADS_S["autograd_forward"]
    assert RATES.backward_node_s == OVERHEADS_S["autograd_backward_node"]
    assert RATES.backward_call_s == OVERHEADS_S["autograd_backward_call"]
    assert RATES.dtensor_linear_backward_s == OVERHEADS_S["dtensor_linear_backward"]
    assert RATES.bandwidth_Bps == pytest.approx(50e9)
    # The AdamW points lie on 80 µs per tensor + bytes / 10 GB/s (fixture).
    assert RATES.adamw_tensor_s == pytest.approx(ADAMW_TENSOR_S)
    assert RATES.adamw_Bps == pytest.approx(ADAMW_BPS)


def test_rates_fall_back_without_the_framework_points():
    old = host_rates(
        cpu_profile(overheads={"autograd_forward": 5e-6, "autograd_backward": 14e-6}, adamw=False)
    )
    assert old.backward_node_s == 14e-6 and old.backward_call_s == 0.0
    assert old.dtensor_forward_s == pytest.approx(DTENSOR_FALLBACK_RATIOS["dtensor_forward"] * 5e-6)
    assert old.adamw_tensor_s == pytest.approx(9 * 2e-6)  # nine operators of one dispatch
    assert old.fsdp_gather_s == pytest.approx(8 * 2e-6)
    assert old.fsdp_gather_tensor_s == pytest.approx(2 * 2e-6)  # two dispatches
    assert old.fsdp_reduce_tensor_s == pytest.approx(old.dtensor_from_local_s)
    assert old.dtensor_adamw_tensor_s == pytest.approx(
        old.adamw_tensor_s + 7 * old.dtensor_forward_s
    )
    bare = host_rates(cpu_profile(overheads={}, adamw=False))
    assert bare.forward_op_s == bare.dispatch_s == bare.backward_node_s == 2e-6


def test_elementwise_kernels_are_priced_by_the_executor_rmsnorm():
    # RMSNorm points on t = 60 µs + bytes / 20 GB/s (nominal 2·N·e bytes), at or below the
    # fit's size limit, and one far above it that the fit must ignore.
    points = [spread(f"memory.rmsnorm.fp32.{b}B", 60e-6 + b / 20e9) for b in (2**17, 2**19, 2**21)]
    points.append(spread("memory.rmsnorm.fp32.67108864B", 1.0))
    rates = host_rates(cpu_profile(extra=tuple(points)))
    assert rates.elementwise_op_s == pytest.approx(10e-6)  # 60 µs over six kernels
    assert rates.elementwise_Bps == pytest.approx(20e9 * 7 / 2)  # 7·N·e counted bytes
    assert RATES.elementwise_op_s == RATES.dispatch_s  # no points: one dispatch
    assert RATES.elementwise_Bps == pytest.approx(50e9)


def test_a_convex_rmsnorm_curve_keeps_its_slope():
    # Points that bend upwards past the per-core cache: t = bytes / 5 GB/s up to 1 MiB,
    # twice that per byte beyond. The least-squares line has a negative intercept; its slope
    # still prices the element-wise bytes, not the streaming bandwidth of x + y (50 GB/s).
    sizes = (2**17, 2**18, 2**19, 2**20, 2**21, 2**22)
    points = tuple(
        spread(f"memory.rmsnorm.fp32.{b}B", b / 5e9 if b <= 2**20 else (2 * b - 2**20) / 5e9)
        for b in sizes
    )
    rates = host_rates(cpu_profile(extra=points))
    n = len(sizes)
    xs = [float(b) for b in sizes]
    ys = [b / 5e9 if b <= 2**20 else (2 * b - 2**20) / 5e9 for b in sizes]
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    assert my - slope * mx < 0  # the fixture's line is degenerate for a positive-intercept fit
    assert rates.elementwise_Bps == pytest.approx(7 / 2 / slope)
    assert rates.elementwise_Bps < 50e9 / 2
    assert rates.elementwise_op_s == rates.dispatch_s  # no kernel cost beyond the dispatch


def test_transposing_copies_have_their_own_rate():
    # Transpose points on t = 5 µs + bytes / 4 GB/s: the rate is the line's slope; without
    # points a transpose streams like an element-wise kernel.
    points = tuple(
        spread(f"memory.transpose.fp32.{b}B", 5e-6 + b / 4e9) for b in (2**17, 2**19, 2**21)
    )
    rates = host_rates(cpu_profile(extra=points))
    assert rates.transpose_Bps == pytest.approx(4e9)
    assert RATES.transpose_Bps == RATES.elementwise_Bps
    work = HostOps(transposed_bytes=8e6)
    assert host_seconds(work, rates, backward=True) == pytest.approx(8e6 / 4e9)


def test_pipelining_p2p_posts_are_priced_as_measured():
    rates = host_rates(cpu_profile(extra=(spread("op_overhead.p2p_post", 250e-6),)))
    assert rates.p2p_post_s == 250e-6  # read as measured, not relative to the dispatch
    assert RATES.p2p_post_s == pytest.approx(3 * RATES.dispatch_s)  # fallback: 3 dispatches
    assert host_seconds(HostOps(p2p_posts=4), rates, backward=False) == pytest.approx(1e-3)


def test_paired_differences_are_read_by_their_median_and_the_rest_by_the_mean():
    def skewed(name: str) -> MeasurementSpread:
        # eight windows, one of them a spell that slowed the plain call: mean 0.1 ms
        return MeasurementSpread(
            quantity=f"op_overhead.{name}", unit="s", num_samples=8, mean=100e-6,
            stdev=5e-4, min=-1.3e-3, max=320e-6, median=300e-6,
        )  # fmt: skip

    names = ("functional_all_reduce", "redistribute_all_gather", "autograd_all_to_all")
    rates = host_rates(cpu_profile(extra=(*map(skewed, names), skewed("p2p_post"))))
    assert rates.functional_s("all_reduce") == pytest.approx(300e-6)
    assert rates.autograd_exchange_s == pytest.approx(300e-6)
    # the redistribution extra is read relative to the dispatch, less what layers count
    older = host_rates(
        cpu_profile(
            extra=(
                dataclasses.replace(skewed("redistribute_all_gather"), mean=300e-6, median=None),
            )
        )
    )
    assert rates.redistribute_s("all_gather") == pytest.approx(older.redistribute_s("all_gather"))
    assert rates.redistribute_s("all_gather") > 0
    # a spread of another kind (a mean of waits) keeps its mean
    assert rates.p2p_post_s == pytest.approx(100e-6)
    # a profile written before the median was recorded: the mean
    bare = dataclasses.replace(skewed("functional_all_reduce"), median=None)
    assert host_rates(cpu_profile(extra=(bare,))).functional_s("all_reduce") == pytest.approx(
        100e-6
    )


def test_the_expert_gradient_stacks_copy_transposed_tensors():
    # Three stacked weights of 8 experts x 128 x 128 (tiny-moe): each stack reads and
    # writes 8·128·128 fp32 values with a stride.
    block = moe_ffn(MOE, CPU, ParallelPlan(), shape())
    assert block.backward.transposed_bytes == pytest.approx(3 * 2 * 8 * 128 * 128 * FP32)
    slow = dataclasses.replace(RATES, transpose_Bps=RATES.transpose_Bps / 10)
    extra = host_seconds(block.backward, slow, backward=True) - host_seconds(
        block.backward, RATES, backward=True
    )
    assert extra == pytest.approx(9 * block.backward.transposed_bytes / RATES.transpose_Bps)


def test_byte_rates_follow_a_calibrated_bandwidth():
    # The profile's own x + y points stream at exactly its fitted bandwidth (50 GB/s,
    # 3 passes of 4 bytes); halving memory_bandwidth_efficiency halves every byte rate.
    adds = tuple(spread(f"memory.add.fp32.{b}B", 2e-6 + b / 50e9) for b in (2**18, 2**20, 2**22))
    base = cpu_profile(extra=adds)
    slow = dataclasses.replace(
        base, compute=dataclasses.replace(base.compute, memory_bandwidth_efficiency=0.25)
    )
    a, b = host_rates(base), host_rates(slow)
    assert a.adamw_Bps == pytest.approx(ADAMW_BPS, rel=1e-6)
    assert b.adamw_Bps == pytest.approx(ADAMW_BPS / 2, rel=1e-6)
    # A calibrated op overhead rescales every host cost read from the spreads (relative to
    # the plain dispatch of the same sweep, here 2 µs).
    plain = cpu_profile(extra=(spread("op_overhead.add", 2e-6),))
    halved = dataclasses.replace(
        plain, compute=dataclasses.replace(plain.compute, op_overhead_s=1e-6)
    )
    assert host_rates(halved).forward_op_s == pytest.approx(host_rates(plain).forward_op_s / 2)


def test_waited_collectives_pay_their_typical_excess():
    entries = (
        spread_over_fit("all_reduce", 1024, 1.0e-3),
        spread_over_fit("all_reduce", 4096, 1.4e-3),
        spread_over_fit("all_reduce", 65536, 0.8e-3),
    )
    rates = host_rates(cpu_profile(extra=entries))
    assert rates.excess_s("all_reduce", 2) == pytest.approx(1.0e-3)  # median of 1.0, 1.4, 0.8
    assert rates.excess_s("all_reduce", 4) == pytest.approx(1.0e-3)  # nearest group size
    assert rates.excess_s("all_gather", 2) == 0.0 and rates.excess_s("all_reduce", 1) == 0.0


def test_the_excess_is_read_above_the_fit_and_above_the_minimum_without_one():
    # the fit describes the fast edge of the samples, not the single fastest one
    (over,) = (spread_over_fit("all_to_all", 1024, 0.3e-3),)
    assert over.min < over.mean - 0.3e-3  # a minimum far below the fit is not the base
    no_fit = spread("all_to_all.intra.3.1024B", 0.9e-3, 0.5e-3)  # no fit of 3 ranks
    rates = host_rates(cpu_profile(extra=(over, no_fit)))
    assert rates.excess_s("all_to_all", 2) == pytest.approx(0.3e-3)
    assert rates.excess_s("all_to_all", 3) == pytest.approx(0.4e-3)


def test_layer_collectives_pay_at_least_the_ranks_drift_after_host_work():
    entries = (
        spread_over_fit("all_reduce", 1024, 1.0e-3),
        spread_over_fit("all_to_all", 1024, 0.1e-3),
        spread("op_overhead.sync_wait", 0.6e-3),
    )
    rates = host_rates(cpu_profile(extra=entries))
    assert rates.sync_excess_s == pytest.approx(0.6e-3)  # read as measured
    assert rates.waited_excess_s("all_reduce", 2) == pytest.approx(1.0e-3)  # its own excess
    assert rates.waited_excess_s("all_to_all", 2) == pytest.approx(0.6e-3)  # the drift
    assert rates.waited_excess_s("all_gather", 2) == pytest.approx(0.6e-3)  # no sweep point
    assert rates.waited_excess_s("all_to_all", 1) == 0.0  # one rank waits for nobody
    assert rates.excess_s("all_to_all", 2) == pytest.approx(0.1e-3)  # unchanged
    assert host_rates(cpu_profile()).sync_excess_s == 0.0  # not measured: the excess alone


def test_the_autograd_all_to_all_pays_its_measured_exchange():
    functional = spread("op_overhead.functional_all_to_all", 300e-6)
    measured = host_rates(
        cpu_profile(extra=(functional, spread("op_overhead.autograd_all_to_all", 900e-6)))
    )
    assert measured.autograd_exchange_s == pytest.approx(900e-6)  # read as measured
    older = host_rates(cpu_profile(extra=(functional,)))
    assert older.autograd_exchange_s == pytest.approx(600e-6)  # fallback: two functional calls
    noise = host_rates(cpu_profile(extra=(spread("op_overhead.autograd_all_to_all", -1e-4),)))
    assert noise.autograd_exchange_s == 0.0
    assert host_rates(cpu_profile()).autograd_exchange_s == 0.0


def test_functional_collectives_pay_their_measured_extra():
    # op_overhead.add is the profile's dispatch here, so the spreads are read as measured
    entries = (
        spread("op_overhead.functional_all_to_all", 500e-6),
        spread("op_overhead.functional_reduce_scatter", -100e-6),  # noise below the plain call
    )
    rates = host_rates(cpu_profile(extra=entries))
    assert rates.functional_s("all_to_all") == pytest.approx(500e-6)
    assert rates.functional_s("reduce_scatter") == 0.0
    assert rates.functional_s("all_gather") == 0.0  # not measured: nothing added
    assert host_rates(cpu_profile()).functional_s("all_to_all") == 0.0


def test_a_calibrated_host_speed_scales_the_redistribution_extra_not_the_functional_one():
    # both read from spreads of 300 µs; the plain dispatch of the same sweep is 2 µs
    entries = (
        spread("op_overhead.add", 2e-6),
        spread("op_overhead.redistribute_all_gather", 300e-6),
        spread("op_overhead.functional_all_gather", 300e-6),
    )
    plain = cpu_profile(extra=entries)
    slower = dataclasses.replace(
        plain, compute=dataclasses.replace(plain.compute, op_overhead_s=2 * 2e-6)
    )
    a, b = host_rates(plain), host_rates(slower)
    # DTensor's redistribution is host work: it follows the dispatch, net of what the
    # layers count (its DTensor operator and to_local, which follow it too)
    counted_a = a.dtensor_forward_s + a.dtensor_to_local_s
    assert a.redistribute_s("all_gather") == pytest.approx(300e-6 - counted_a)
    assert b.redistribute_s("all_gather") == pytest.approx(2 * (300e-6 - counted_a))
    # the functional extra is a collective's cost, read as measured
    assert b.functional_s("all_gather") == a.functional_s("all_gather") == pytest.approx(300e-6)


def test_only_the_moe_bookkeeping_collectives_are_plain_calls():
    plan = ParallelPlan(ep=2, dp=2, tp=2)
    ops = moe_ffn(MOE, CPU, plan, shape(ep=2, dp=2, tp=2))
    comms = [*ops.forward_comms, *ops.backward_comms]
    plain = [(c.op, c.size_bytes) for c in comms if not c.functional]
    experts = MOE.num_experts * 8
    assert plain == [("all_to_all", experts), ("all_reduce", experts)]
    tokens = [c for c in comms if c.op == "all_to_all" and c.functional]
    assert sum(c.count for c in tokens) == 4  # there and back, forward and backward
    assert all(c.autograd for c in tokens)  # all_to_all_single_autograd
    assert not any(c.autograd for c in comms if c not in tokens)
    sp = ParallelPlan(tp=2, sequence_parallel=True)
    dense = layer_ops(TINY, CPU, RATES, sp, shape(tp=2, sequence_parallel=True), is_moe=False)
    assert all(c.functional for c in (*dense.forward_comms, *dense.backward_comms))


# ---- pricing and single modules -----------------------------------------------------------


def test_host_seconds_prices_each_count():
    work = HostOps(ops=10, views=4, kernels=2, bytes=5e6, kernel_s=1e-3, dt_ops=1, dt_wraps=1)
    forward = host_seconds(work, RATES, backward=False)
    assert forward == pytest.approx(10 * 5e-6 + 6 * 2e-6 + 5e6 / 50e9 + 1e-3 + 40e-6 + 100e-6)
    backward = host_seconds(work, RATES, backward=True)
    assert backward == pytest.approx(10 * 8e-6 + 6 * 2e-6 + 5e6 / 50e9 + 1e-3 + 40e-6 + 100e-6)
    assert HostOps(ops=1).plus(HostOps(ops=2)).scaled(2).ops == 6


def test_linear_counts_its_nodes_and_gradient_accumulation():
    plain = linear(CPU, 128, 256, 128, accumulate=0.5)
    kernel = gemm_time_s(CPU, 128, 256, 128, "fp32") - 2e-6
    assert plain.forward == HostOps(ops=1, views=3, kernel_s=pytest.approx(kernel))
    # UnsafeView, Mm, T, View nodes and the weight's AccumulateGrad; dgrad + wgrad.
    assert plain.backward.ops == 5 and plain.backward.kernels == 1
    assert plain.backward.bytes == pytest.approx(0.5 * 3 * FP32 * 256 * 128)
    dt = linear(CPU, 128, 256, 128, dtensor=True)
    assert dt.forward.dt_linears == dt.backward.dt_linears == 1 and dt.forward.ops == 0


def test_norm_and_rope_bytes():
    norm = rms_norm(128, 128)
    n = 128 * 128
    assert norm.forward.ops == 6 and norm.forward.bytes == 7 * n * FP32
    assert norm.backward.ops == 7 and norm.backward.bytes == 24 * n * FP32
    sp = rms_norm(64, 128, dtensor=True)
    assert (sp.forward.dt_norms, sp.forward.ops, sp.forward.dt_ops) == (1, 0, 0)
    assert sp.forward.bytes == 7 * 64 * 128 * FP32
    r = rope(1000)
    assert (r.forward.ops, r.forward.views, r.forward.bytes) == (5, 5, 10 * 1000 * FP32)
    assert r.backward.ops == 6 and r.backward.bytes == 12 * 1000 * FP32


# ---- layers: counts read off the executor ------------------------------------------------


def test_dense_layer_without_tp_has_the_executor_operator_count():
    # Source: torch.profiler trace of one tiny (Llama) training step on the executor
    # (2026-11-29): 58 top-level forward dispatches per layer = 26 recorded element-wise
    # operators (2 norms x 6, 2 ropes x 5, 2 residual adds, silu, product), 7 linears,
    # SDPA, the output reshape (a copy of the transposed heads) and 23 views and no-op
    # casts; each linear adds t, view and _unsafe_view inside aten::linear.
    layer = layer_ops(TINY, CPU, RATES, ParallelPlan(), shape(), is_moe=False)
    fwd = layer.forward
    assert fwd.ops == 26 + 7 + 1 + 1
    assert fwd.views == 23 + 7 * 3 + 13  # and 13 module calls
    # Backward: 74 autograd nodes per layer in the same trace (7 x (4 + AccumulateGrad),
    # 2 norms x (6 + AccumulateGrad), 3 views, 2 ropes x 6, 4 transposes, SDPA, the
    # reshape, 2 adds, silu, product).
    assert layer.backward.ops == 74
    assert not layer.forward_comms and not layer.backward_comms


def test_tensor_parallel_layer_collectives():
    # DTensor TP: all-reduce after wo and w2 forward; each column-parallel input is wrapped
    # on its own, so the inputs of wq, wk, wv, w1, w3 all-reduce their gradients backward.
    layer = layer_ops(TINY, CPU, RATES, ParallelPlan(tp=2), shape(tp=2), is_moe=False)
    assert count(layer.forward_comms, "all_reduce") == 2
    assert count(layer.backward_comms, "all_reduce") == 5
    assert layer.forward.dt_linears == 7 and layer.forward.dt_wraps == 7
    size = {c.size_bytes for c in layer.forward_comms}
    assert size == {128 * 128 * FP32}


def test_sequence_parallel_layer_collectives():
    plan = ParallelPlan(tp=2, sequence_parallel=True)
    layer = layer_ops(TINY, CPU, RATES, plan, shape(tp=2, sequence_parallel=True), is_moe=False)
    assert count(layer.forward_comms, "all_gather") == 2
    assert count(layer.forward_comms, "reduce_scatter") == 2
    assert count(layer.backward_comms, "all_gather") == 2
    assert count(layer.backward_comms, "reduce_scatter") == 2
    assert count(layer.backward_comms, "all_reduce") == 0
    # Norms run as DTensor modules on the sequence shard.
    assert layer.forward.dt_norms == layer.backward.dt_norms == 2


def test_a_sequence_parallel_norm_pays_the_profiled_module_or_its_operators():
    # Without the probe: the operators at the DTensor chain rate (the counts of rms_norm).
    sp = rms_norm(64, 128, dtensor=True)
    counted_fwd = host_seconds(
        HostOps(dt_ops=6, views=3, allocs=6, dt_wraps=1, bytes=7 * 64 * 128 * FP32),
        RATES,
        backward=False,
    )
    assert RATES.dtensor_norm_forward_s == 0.0
    assert host_seconds(sp.forward, RATES, backward=False) == pytest.approx(counted_fwd)
    # With it: the probe's figure per call (relative to the dispatch, as the other host
    # rates), the norm's bytes on top.
    probed = cpu_profile(
        extra=(
            spread("op_overhead.dtensor_norm_forward", 400e-6),
            spread("op_overhead.dtensor_norm_backward", 700e-6),
        )
    )
    rates = host_rates(probed)
    assert (rates.dtensor_norm_forward_s, rates.dtensor_norm_backward_s) == pytest.approx(
        (400e-6, 700e-6)
    )
    bytes_s = 24 * 64 * 128 * FP32 / rates.elementwise_Bps
    assert host_seconds(sp.backward, rates, backward=True) == pytest.approx(700e-6 + bytes_s)
    plain = rms_norm(128, 128)
    assert host_seconds(plain.forward, rates, backward=False) == pytest.approx(
        host_seconds(plain.forward, RATES, backward=False)
    )


def test_context_parallel_gathers_keys_and_values():
    x = shape(cp=2)
    core = attention_core(TINY, CPU, RATES, x)
    assert count(core.forward_comms, "all_gather") == 2
    assert count(core.backward_comms, "reduce_scatter") == 2
    kv = TINY.query_groups * TINY.head_dim
    assert {c.size_bytes for c in core.forward_comms} == {2 * 64 * kv * FP32}
    # The masked kernel covers the whole (S/cp) x S rectangle: as much as one causal
    # pass over the full sequence, though the rank holds half of the queries.
    plain = attention_core(TINY, CPU, RATES, shape())
    assert core.forward.kernel_s == pytest.approx(plain.forward.kernel_s, rel=0.05)


def test_attention_backward_takes_out_the_profiled_autograd_call():
    core = attention_core(TINY, CPU, RATES, shape())
    assert core.backward.kernel_s == pytest.approx(2.5 * core.forward.kernel_s - 100e-6, rel=0.02)


def test_embedding_and_head():
    emb = embedding_ops(TINY, shape(), 512)
    assert emb.forward.ops == 1 and not emb.forward_comms
    tp = embedding_ops(TINY, shape(tp=2), 512)
    assert count(tp.forward_comms, "all_reduce") == 1
    head = head_ops(TINY, CPU, shape(tp=2), 512)
    # Logits all-gathered to the full vocabulary, input gradient all-reduced.
    assert count(head.forward_comms, "all_gather") == 1
    assert {c.size_bytes for c in head.forward_comms} == {128 * 512 * FP32}
    assert count(head.backward_comms, "all_reduce") == 1


def test_moe_layer_scales_with_local_experts_and_adds_all_to_all():
    one = moe_ffn(MOE, CPU, ParallelPlan(), shape())
    two = moe_ffn(MOE, CPU, ParallelPlan(dp=2, ep=2), shape(dp=2, ep=2))
    assert not one.forward_comms
    # Eight experts: three matmuls, silu and product each; four of them under ep = 2.
    assert one.forward.ops - two.forward.ops == pytest.approx(4 * 5)
    # the routing bookkeeping, and the regrouping of received rows under ep = 2
    assert (one.forward.routing_ops, two.forward.routing_ops) == (28, 28 + 17)
    assert count(two.forward_comms, "all_to_all") == 3  # counts, dispatch, combine
    assert count(two.backward_comms, "all_to_all") == 2


def test_moe_routing_operators_pay_the_measured_cold_routing_cost():
    # op_overhead.add is the profile's dispatch here: the spread is read at scale 1
    dear = host_rates(cpu_profile(extra=(spread("op_overhead.routing_op", 20e-6),)))
    assert dear.routing_op_s == pytest.approx(20e-6)
    assert RATES.routing_op_s == RATES.forward_op_s  # fallback: a recorded operator
    assert host_seconds(HostOps(routing_ops=3), dear, backward=False) == pytest.approx(60e-6)
    plan = ParallelPlan(dp=2, ep=2)
    ops = moe_ffn(MOE, CPU, plan, shape(dp=2, ep=2)).forward
    extra = host_seconds(ops, dear, backward=False) - host_seconds(ops, RATES, backward=False)
    assert extra == pytest.approx((28 + 17) * (20e-6 - RATES.forward_op_s))
    # a dense layer has no routing
    dense = layer_ops(TINY, CPU, RATES, ParallelPlan(), shape(), is_moe=False)
    assert dense.forward.routing_ops == 0


def test_recompute_only_changes_the_attention_block_through_saved_work():
    a = attention_block(TINY, CPU, RATES, shape())
    b = attention_block(TINY, CPU, RATES, shape(recompute="selective"))
    assert a.forward == b.forward


# ---- transcendental kernels --------------------------------------------------------------

RMSNORM_POINTS = tuple(
    spread(f"memory.rmsnorm.fp32.{b}B", 60e-6 + b / 20e9) for b in (2**17, 2**19, 2**21)
)
"""RMSNorm points on t = 60 µs + bytes / 20 GB/s: element-wise kernels cost 10 µs (60 / 6)
and their counted bytes stream at 70 GB/s (7/2 x 20)."""
SLOW_PER_ELEMENT_S = 4e-9
"""Slope of the synthetic transcendental rows: far above the per-byte price."""


def with_transcendental(per_element_s: float, overheads: dict[str, float] | None = None):
    """The fixture with the RMSNorm points and every probed kernel on t = 3 µs + n·slope."""
    profile = cpu_profile(extra=RMSNORM_POINTS, overheads=overheads)
    rows = tuple(
        HostTranscendental(
            op=op, elements=n, num_samples=5, mean_s=3e-6 + n * per_element_s, min_s=0.0, max_s=1.0
        )
        for op in TRANSCENDENTAL_OPS
        for n in (2**15, 2**17, 2**19)
    )
    return dataclasses.replace(profile, host=dataclasses.replace(profile.host, transcendental=rows))


def test_transcendental_kernels_are_priced_by_the_probe_line_instead_of_their_bytes():
    rates = host_rates(with_transcendental(SLOW_PER_ELEMENT_S))
    assert rates.elementwise_op_s == pytest.approx(10e-6)
    silu = rates.transcendental.activation_forward
    assert silu.kernel_s == pytest.approx(3e-6 - 10e-6)  # the line's call less the counted one
    assert silu.element_s == pytest.approx(SLOW_PER_ELEMENT_S - 8 / 70e9)
    backward = rates.transcendental.log_softmax_backward
    assert backward.element_s == pytest.approx(SLOW_PER_ELEMENT_S - 12 / 70e9)
    # one SiLU forward as the layers count it costs its recorded operator's host work and
    # the probe's line: 3 µs + n·slope
    n = 50_000
    work = HostOps(ops=1, allocs=1, bytes=8 * n, activation_kernels=1, activation_elements=n)
    assert host_seconds(work, rates, backward=False) == pytest.approx(
        rates.forward_op_s - rates.dispatch_s + 3e-6 + n * SLOW_PER_ELEMENT_S
    )
    # a calibrated host speed (the profile's dispatch over the sweep's add) rescales the line
    faster = host_rates(with_transcendental(SLOW_PER_ELEMENT_S, {**OVERHEADS_S, "add": 4e-6}))
    assert faster.transcendental.activation_forward.element_s == pytest.approx(
        SLOW_PER_ELEMENT_S / 2 - 8 / 70e9
    )


def test_a_slow_transcendental_rate_predicts_a_slower_forward():
    plan, x = ParallelPlan(), shape()
    slow = host_rates(with_transcendental(SLOW_PER_ELEMENT_S))
    base = host_rates(cpu_profile(extra=RMSNORM_POINTS))
    layer = layer_ops(TINY, CPU, base, plan, x, is_moe=False)
    head = head_ops(TINY, CPU, x, 512)
    n_act, n_loss = 128 * TINY.ffn_hidden_size, 128 * 512  # T·F silu, T·V log_softmax
    assert layer.forward.activation_elements == layer.backward.activation_elements == n_act
    assert layer.forward.activation_kernels == 1
    assert head.forward.log_softmax_elements == head.backward.log_softmax_elements == n_loss
    for work, n, price in (
        (layer.forward, n_act, slow.transcendental.activation_forward),
        (head.forward, n_loss, slow.transcendental.log_softmax_forward),
    ):
        extra = host_seconds(work, slow, backward=False) - host_seconds(work, base, backward=False)
        assert extra > 0 and extra == pytest.approx(price.extra_s(1, n))


def test_a_profile_without_the_probe_prices_transcendental_kernels_per_byte():
    assert RATES.transcendental == NO_TRANSCENDENTAL
    work = head_ops(TINY, CPU, shape(), 512).forward
    per_byte = dataclasses.replace(work, log_softmax_kernels=0.0, log_softmax_elements=0.0)
    assert host_seconds(work, RATES, backward=False) == host_seconds(
        per_byte, RATES, backward=False
    )
    # rows whose time falls with the size give no line: nothing priced
    assert host_rates(with_transcendental(-1e-12)).transcendental == NO_TRANSCENDENTAL


def test_moe_experts_count_their_activation_and_the_router_none():
    ops = moe_ffn(MOE, CPU, ParallelPlan(dp=2, ep=2), shape(dp=2, ep=2))
    routed = MOE.moe_top_k * 128  # k·T rows over the local experts
    shared = 128 * MOE.moe_shared_expert_size
    assert ops.forward.activation_elements == pytest.approx(
        routed * MOE.expert_ffn_hidden_size + shared
    )
    assert ops.forward.activation_kernels == MOE.num_experts // 2 + 1  # local experts, shared
    # the router's softmaxes are routing bookkeeping, timed whole by the routing probe
    assert ops.forward.log_softmax_kernels == 0


def test_a_plan_on_a_slow_transcendental_profile_is_predicted_slower_and_screened_alike():
    job = TrainingJob(seq_length=128, global_batch_size=8, precision="fp32")
    cluster = ClusterSpec(hardware="cpu-test", num_gpus=2, gpus_per_node=4)
    plan = ParallelPlan(dp=2)
    slow, base = with_transcendental(SLOW_PER_ELEMENT_S), cpu_profile(extra=RMSNORM_POINTS)
    times = [
        estimate_plan(TINY, cluster, job, plan, p, options=TORCH_OPTIONS).iteration_time_s
        for p in (base, slow)
    ]
    assert times[1] > times[0]
    screened = screen_plans(TINY, cluster, job, slow, plans_frame([plan]), options=TORCH_OPTIONS)
    assert screened["iteration_time_s"][0] == pytest.approx(times[1], rel=1e-12)
