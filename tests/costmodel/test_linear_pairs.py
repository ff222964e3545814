"""TP collectives and FP8 quantization around a linear pair
(costmodel.runtimes.megatron.linear_pairs)."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.collectives import collective_time_s
from costmodel.compute import memory_bound_time_s
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.fp8_quantization import fp8_quantize_time_s
from costmodel.passes import comm_groups
from costmodel.runtimes.megatron.layer_shape import layer_shape
from costmodel.runtimes.megatron.linear_pairs import (
    fp8_pair_quantize_s,
    fp8_pair_s,
    sp_all_gather_bytes,
    tp_pair,
)
from costmodel.topology import plan_placements
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


GB200 = load_profile("gb200-nvl72")
NVFP4_JOB = TrainingJob(seq_length=8192, global_batch_size=64, precision="nvfp4")
SP4 = ParallelPlan.for_world(64, tp=4, sequence_parallel=True)


def test_nvfp4_sp_all_gathers_move_nvfp4_copies():
    # TE _all_gather_nvfp4 (pytorch/distributed.py, pin 5671fd36): forward the norm output's
    # row-wise copy, backward the row-parallel output gradient's row-wise and column-wise
    # copies (one copy for a frozen pair); 16-bit and FP8 jobs gather T x h x 2 bytes.
    h = LLAMA.hidden_size
    x = layer_shape(NVFP4_JOB, SP4)
    assert sp_all_gather_bytes(x, h, "forward") == pytest.approx(8192 * h * 0.5625)
    assert sp_all_gather_bytes(x, h, "backward") == pytest.approx(8192 * h * 1.125)
    assert sp_all_gather_bytes(x, h, "backward", frozen=True) == pytest.approx(8192 * h * 0.5625)
    for precision in ("bf16", "fp8"):
        job = TrainingJob(seq_length=8192, global_batch_size=64, precision=precision)
        shape = layer_shape(job, SP4)
        assert sp_all_gather_bytes(shape, h, "backward") == 8192 * h * 2


def test_nvfp4_tp_pair_gathers_nvfp4_and_reduce_scatters_bf16():
    h, t = LLAMA.hidden_size, 8192
    x = layer_shape(NVFP4_JOB, SP4)
    groups = comm_groups(plan_placements(GB200, SP4, 4))
    first, second = (t, 2 * LLAMA.ffn_hidden_size / 4, h), (t, h, LLAMA.ffn_hidden_size / 4)
    options = dataclasses.replace(DEFAULT_OPTIONS, tp_dgrad_overlap=False)
    fwd, bwd = tp_pair(GB200, SP4, x, h, groups, first, second, options)
    rs = collective_time_s(GB200, "reduce_scatter", t * h * 2, groups.tp)
    ag_f = collective_time_s(GB200, "all_gather", t * h * 0.5625, groups.tp)
    ag_b = collective_time_s(GB200, "all_gather", t * h * 1.125, groups.tp)
    assert (fwd.tp_s, fwd.tp_exposed_s) == pytest.approx((ag_f + rs, ag_f + rs))
    assert (bwd.tp_s, bwd.tp_exposed_s) == pytest.approx((ag_b + rs, ag_b + rs))
    assert (fwd.tp_bytes, bwd.tp_bytes) == pytest.approx((t * h * 2.5625, t * h * 3.125))
    bf16 = layer_shape(TrainingJob(seq_length=8192, global_batch_size=64), SP4)
    bf16_fwd, _ = tp_pair(GB200, SP4, bf16, h, groups, first, second, options)
    assert bf16_fwd.tp_s > fwd.tp_s


def test_nvfp4_sp_backward_reorders_both_gathered_column_wise_copies():
    # _post_process_nvfp4_gather's swap_first_dims: read and write 0.5625 bytes per element of
    # the gathered [T, h] copy, for wgrad's norm output and the row-parallel output gradient.
    h, t, tp = LLAMA.hidden_size, 8192, 4
    column_out, row_in = 2 * LLAMA.ffn_hidden_size / tp, LLAMA.ffn_hidden_size / tp
    x = layer_shape(NVFP4_JOB, SP4)
    _, bwd = fp8_pair_s(GB200, x, h, column_out, row_in, "tensorwise", False)
    quantize = fp8_quantize_time_s(GB200, t * column_out, 2, recipe="nvfp4")
    quantize += fp8_quantize_time_s(GB200, t / tp * h, 2, recipe="nvfp4")
    fixup = memory_bound_time_s(GB200, 2 * 0.5625 * t * h, num_ops=2)
    assert bwd == pytest.approx(quantize + 2 * fixup)
    no_sp = layer_shape(NVFP4_JOB, ParallelPlan.for_world(64, tp=4, sequence_parallel=False))
    _, bwd_no_sp = fp8_pair_s(GB200, no_sp, h, column_out, row_in, "tensorwise", False)
    want = fp8_quantize_time_s(GB200, t * column_out, 2, recipe="nvfp4")
    want += fp8_quantize_time_s(GB200, t * h, 2, recipe="nvfp4")
    assert bwd_no_sp == pytest.approx(want)
