"""Operator and collective counts of the executor model's layers, read off the executor
(`costmodel.runtimes.torch.layers`, `costmodel.runtimes.torch.moe`): dense, tensor-,
sequence- and context-parallel layers, embedding and head, and MoE layers."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.runtimes.torch.layers import (
    attention_block,
    attention_core,
    embedding_ops,
    head_ops,
    layer_ops,
    moe_ffn,
)
from costmodel.runtimes.torch.ops import FP32, HostOps, host_seconds
from costmodel.runtimes.torch.rates import host_rates
from specs.plan import ParallelPlan
from tests.costmodel.cpu_fixture import cpu_profile, spread
from tests.costmodel.torch_fixture import CPU, MOE, RATES, TINY, count, shape


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


def test_recompute_only_changes_the_attention_block_through_saved_work():
    a = attention_block(TINY, CPU, RATES, shape())
    b = attention_block(TINY, CPU, RATES, shape(recompute="selective"))
    assert a.forward == b.forward


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
