"""The compute sweep's operands: GEMMs rotate through sets beyond a core's L2, and the
memory sweep times a transposing copy (profiles.profiler.compute)."""

from __future__ import annotations

import torch

from profiles.profiler.compute import (
    COLD_POOL_BYTES,
    MAX_OPERAND_SETS,
    TRANSPOSE_WIDTH,
    gemm_operands,
    operand_sets,
    time_memory_ops,
)
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
