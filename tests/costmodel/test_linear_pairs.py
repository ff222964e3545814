"""TP collectives and FP8 quantization around a linear pair
(costmodel.runtimes.megatron.linear_pairs)."""

from __future__ import annotations

import pytest

from costmodel.compute import memory_bound_time_s
from costmodel.runtimes.megatron.linear_pairs import fp8_pair_quantize_s
from profiles.store import load_profile
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset

H100 = load_profile("h100-sxm-80gb")
LLAMA = get_preset("llama3-70b")
JOB = TrainingJob(seq_length=4096, global_batch_size=64)


def test_fp8_pair_quantizes_every_linear_operand():
    # Forward: the QKV (or FC1) input out of the norm kernel (T/tp x h, 1 byte net) and the
    # projection (or FC2) input (T x width/tp, 4 bytes). Backward: both output gradients,
    # T x column width/tp and T/tp x h, 4 bytes each.
    plan = ParallelPlan.for_world(8, tp=8, sequence_parallel=True)
    fp8_job = TrainingJob(seq_length=4096, global_batch_size=64, precision="fp8")
    t, h, tp = 4096, LLAMA.hidden_size, 8
    column_out, row_in = 2 * LLAMA.ffn_hidden_size / tp, LLAMA.ffn_hidden_size / tp
    fwd, bwd = fp8_pair_quantize_s(H100, fp8_job, plan, h, column_out, row_in, recipe="delayed")
    want_fwd = memory_bound_time_s(H100, t / tp * h) + memory_bound_time_s(H100, 4 * t * row_in)
    want_bwd = memory_bound_time_s(H100, 4 * t * column_out)
    want_bwd += memory_bound_time_s(H100, 4 * t / tp * h)
    assert (fwd, bwd) == pytest.approx((want_fwd, want_bwd))
    assert fp8_pair_quantize_s(H100, JOB, plan, h, column_out, row_in, recipe="delayed") == (
        0.0,
        0.0,
    )
