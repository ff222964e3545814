"""TP collectives and FP8 quantization around a linear pair
(costmodel.runtimes.megatron.linear_pairs, pair_quantization)."""

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
    sp_all_gather_bytes,
    tp_pair,
    userbuffers_all_gather_bytes,
)
from costmodel.runtimes.megatron.pair_quantization import fp8_pair_quantize_s, fp8_pair_s
from costmodel.runtimes.megatron.userbuffers import ring_send_tail_s, tp_overlap_pair_s
from costmodel.scale_up import RankPacking
from costmodel.topology import plan_placements
from profiles.store import load_profile
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset

H100 = load_profile("h100-sxm-80gb")
LLAMA = get_preset("llama3-70b")
JOB = TrainingJob(seq_length=4096, global_batch_size=64)


def test_fp8_pair_quantizes_every_linear_operand():
    # Without SP, forward: the QKV (or FC1) input out of the norm kernel (T x h, 1 byte net)
    # and the projection (or FC2) input (T x width/tp, 4 bytes). Backward: both output
    # gradients, T x column width/tp and T x h, 4 bytes each.
    plan = ParallelPlan.for_world(8, tp=8, sequence_parallel=False)
    fp8_job = TrainingJob(seq_length=4096, global_batch_size=64, precision="fp8")
    t, h, tp = 4096, LLAMA.hidden_size, 8
    column_out, row_in = 2 * LLAMA.ffn_hidden_size / tp, LLAMA.ffn_hidden_size / tp
    fwd, bwd = fp8_pair_quantize_s(H100, fp8_job, plan, h, column_out, row_in, recipe="delayed")
    want_fwd = memory_bound_time_s(H100, t * h) + memory_bound_time_s(H100, 4 * t * row_in)
    want_bwd = memory_bound_time_s(H100, 4 * t * column_out)
    want_bwd += memory_bound_time_s(H100, 4 * t * h)
    assert (fwd, bwd) == pytest.approx((want_fwd, want_bwd))
    assert fp8_pair_quantize_s(H100, JOB, plan, h, column_out, row_in, recipe="delayed") == (
        0.0,
        0.0,
    )


def test_fp8_sp_quantizes_the_gathered_operands_row_wise_and_transposes_on_hopper():
    # TE _all_gather_fp8 (pytorch/distributed.py, v2.5 to HEAD) gathers the row-wise copy
    # alone: with SP the norm output (delayed: the norm writes FP8, 1 - e = -1 bytes net,
    # floored at 0) and the row-parallel output gradient (e + 1 = 3 bytes) on T/tp rows
    # write one copy; on Hopper (TN-only FP8 GEMMs) the backward transposes the gathered
    # norm output and output gradient, read and write 1 byte per element of T x h each.
    plan = ParallelPlan.for_world(8, tp=8, sequence_parallel=True)
    fp8_job = TrainingJob(seq_length=4096, global_batch_size=64, precision="fp8")
    t, h, tp = 4096, LLAMA.hidden_size, 8
    column_out, row_in = 2 * LLAMA.ffn_hidden_size / tp, LLAMA.ffn_hidden_size / tp
    x = layer_shape(fp8_job, plan)
    fwd, bwd = fp8_pair_s(H100, x, h, column_out, row_in, "delayed", False)
    want_fwd = memory_bound_time_s(H100, 0.0) + memory_bound_time_s(H100, 4 * t * row_in)
    want_bwd = memory_bound_time_s(H100, 4 * t * column_out)
    want_bwd += memory_bound_time_s(H100, 3 * t / tp * h)
    transpose = memory_bound_time_s(H100, 2 * t * h)
    assert (fwd, bwd) == pytest.approx((want_fwd, want_bwd + 2 * transpose))
    _, blackwell = fp8_pair_s(H100, x, h, column_out, row_in, "delayed", False, tn_gemm_only=False)
    assert blackwell == pytest.approx(want_bwd)
    # MXFP8 gathers column-wise data: both copies stay local, no transpose.
    _, mx = fp8_pair_s(H100, x, h, column_out, row_in, "mxfp8", False)
    want_mx = fp8_quantize_time_s(H100, t * column_out, 2, recipe="mxfp8")
    want_mx += fp8_quantize_time_s(H100, t / tp * h, 2, recipe="mxfp8")
    assert mx == pytest.approx(want_mx)


GB200 = load_profile("gb200-nvl72")
NVFP4_JOB = TrainingJob(seq_length=8192, global_batch_size=64, precision="nvfp4")
SP4 = ParallelPlan.for_world(64, tp=4, sequence_parallel=True)


def test_nvfp4_sp_all_gathers_move_nvfp4_copies():
    # TE _all_gather_nvfp4 (pytorch/distributed.py, pin 5671fd36): forward the norm output's
    # row-wise copy, backward the row-parallel output gradient's row-wise and column-wise
    # copies (one copy for a frozen pair); 16-bit jobs gather T x h x 2 bytes.
    h = LLAMA.hidden_size
    x = layer_shape(NVFP4_JOB, SP4)
    assert sp_all_gather_bytes(x, h, "forward") == pytest.approx(8192 * h * 0.5625)
    assert sp_all_gather_bytes(x, h, "backward") == pytest.approx(8192 * h * 1.125)
    assert sp_all_gather_bytes(x, h, "backward", frozen=True) == pytest.approx(8192 * h * 0.5625)
    bf16 = layer_shape(TrainingJob(seq_length=8192, global_batch_size=64), SP4)
    assert sp_all_gather_bytes(bf16, h, "backward") == 8192 * h * 2


FP8_JOB = TrainingJob(seq_length=8192, global_batch_size=64, precision="fp8")


@pytest.mark.parametrize(
    ("recipe", "forward_per_element", "backward_per_element"),
    [
        # _all_gather_fp8: the row-wise FP8 data alone, each way.
        ("delayed", 1.0, 1.0),
        ("tensorwise", 1.0, 1.0),
        # _all_gather_mxfp8: data + E8M0 scales (1/32 byte); the output gradient's row-wise
        # and column-wise copies backward.
        ("mxfp8", 1 + 1 / 32, 2 * (1 + 1 / 32)),
    ],
)
def test_fp8_sp_all_gathers_move_fp8_copies(recipe, forward_per_element, backward_per_element):
    h, t = LLAMA.hidden_size, 8192
    x = layer_shape(FP8_JOB, SP4)
    assert sp_all_gather_bytes(x, h, "forward", recipe=recipe) == pytest.approx(
        t * h * forward_per_element
    )
    assert sp_all_gather_bytes(x, h, "backward", recipe=recipe) == pytest.approx(
        t * h * backward_per_element
    )
    # A frozen pair (no bias, no wgrad) gathers the row-wise copy alone.
    frozen = sp_all_gather_bytes(x, h, "backward", recipe=recipe, frozen=True)
    assert frozen == pytest.approx(t * h * forward_per_element)
    # A LoRA adapter on the column-parallel layer: Megatron-Bridge's
    # return_layernorm_output_gathered makes TE gather the 16-bit norm output.
    returned = sp_all_gather_bytes(x, h, "forward", recipe=recipe, norm_returned=True)
    assert returned == pytest.approx(t * h * 2)


def test_fp8_tp_pair_gathers_fp8_and_reduce_scatters_bf16():
    h, t = LLAMA.hidden_size, 8192
    x = layer_shape(FP8_JOB, SP4)
    groups = comm_groups(plan_placements(GB200, SP4, RankPacking(gpus_per_node=4)))
    first, second = (t, 2 * LLAMA.ffn_hidden_size / 4, h), (t, h, LLAMA.ffn_hidden_size / 4)
    options = dataclasses.replace(DEFAULT_OPTIONS, tp_dgrad_overlap=False, fp8_recipe="tensorwise")
    fwd, bwd = tp_pair(GB200, SP4, x, h, groups, first, second, options)
    rs = collective_time_s(GB200, "reduce_scatter", t * h * 2, groups.tp)
    ag = collective_time_s(GB200, "all_gather", t * h * 1, groups.tp)
    assert (fwd.tp_exposed_s, bwd.tp_exposed_s) == pytest.approx((ag + rs, ag + rs))
    assert (fwd.tp_bytes, bwd.tp_bytes) == pytest.approx((t * h * 3, t * h * 3))


def test_nvfp4_tp_pair_gathers_nvfp4_and_reduce_scatters_bf16():
    h, t = LLAMA.hidden_size, 8192
    x = layer_shape(NVFP4_JOB, SP4)
    groups = comm_groups(plan_placements(GB200, SP4, RankPacking(gpus_per_node=4)))
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


OVERLAP4 = ParallelPlan.for_world(64, tp=4, sequence_parallel=True, tp_comm_overlap=True)


def test_userbuffers_all_gathers_move_fp8_bytes_and_reduce_scatters_bf16():
    # initialize_ub allocates uint8 buffers for the all-gather GEMMs under FP8 (fp8_buf,
    # layers_all_gather_overlap); the reduce-scatters stay 16-bit. nvfp4 and bf16 jobs: T x h
    # x e (TE has no NVFP4 userbuffers path).
    h, t = LLAMA.hidden_size, 8192
    assert userbuffers_all_gather_bytes(layer_shape(FP8_JOB, OVERLAP4), h) == t * h
    assert userbuffers_all_gather_bytes(layer_shape(NVFP4_JOB, OVERLAP4), h) == t * h * 2
    x = layer_shape(FP8_JOB, OVERLAP4)
    groups = comm_groups(plan_placements(GB200, OVERLAP4, RankPacking(gpus_per_node=4)))
    first, second = (t, 2 * LLAMA.ffn_hidden_size / 4, h), (t, h, LLAMA.ffn_hidden_size / 4)
    options = dataclasses.replace(DEFAULT_OPTIONS, fp8_recipe="tensorwise")
    fwd, bwd = tp_pair(GB200, OVERLAP4, x, h, groups, first, second, options)
    want = tp_overlap_pair_s(
        GB200, 4, "fp8", t * h * 2, groups.tp, first, second, options=options, gather_bytes=t * h
    )
    assert (fwd.tp_exposed_s, bwd.tp_exposed_s) == pytest.approx(want)
    assert fwd.tp_bytes == pytest.approx(t * h * 3)


def test_mxfp8_userbuffers_gather_scales_by_nccl():
    # fill_userbuffers_buffer_for_all_gather gathers the MXFP8 scales (T x h / 32 bytes) with a
    # blocking NCCL all-gather per gathered copy: forward 1, backward 2 (1 when frozen); the
    # wgrad's column-wise output gradient (data and scales) is gathered under the dgrad GEMM.
    h, t = LLAMA.hidden_size, 8192
    x = layer_shape(FP8_JOB, OVERLAP4)
    groups = comm_groups(plan_placements(GB200, OVERLAP4, RankPacking(gpus_per_node=4)))
    first, second = (t, 2 * LLAMA.ffn_hidden_size / 4, h), (t, h, LLAMA.ffn_hidden_size / 4)
    cs = dataclasses.replace(DEFAULT_OPTIONS, fp8_recipe="tensorwise")
    mx = dataclasses.replace(DEFAULT_OPTIONS, fp8_recipe="mxfp8")
    cs_f, cs_b = tp_pair(GB200, OVERLAP4, x, h, groups, first, second, cs)
    mx_f, mx_b = tp_pair(GB200, OVERLAP4, x, h, groups, first, second, mx)
    scale = collective_time_s(GB200, "all_gather", t * h / 32, groups.tp)
    ag = collective_time_s(GB200, "all_gather", t * h, groups.tp)
    assert mx_f.tp_exposed_s - cs_f.tp_exposed_s == pytest.approx(scale)
    assert mx_b.tp_exposed_s - cs_b.tp_exposed_s == pytest.approx(2 * scale + wgrad_tail(mx))
    assert mx_b.tp_s - cs_b.tp_s == pytest.approx(ag + 3 * scale)
    _, frozen = tp_pair(GB200, OVERLAP4, x, h, groups, first, second, mx, frozen=True)
    _, cs_frozen = tp_pair(GB200, OVERLAP4, x, h, groups, first, second, cs, frozen=True)
    assert frozen.tp_exposed_s - cs_frozen.tp_exposed_s == pytest.approx(scale)


def test_returned_norm_output_is_quantized_again_after_its_16_bit_gather():
    # return_layernorm_output_gathered (Megatron-Bridge LoRA with SP): TE quantizes the local
    # 16-bit norm output on the separate path (both copies for a trained pair) and the gathered
    # T x h tensor row-wise for the GEMM.
    h, t, tp = LLAMA.hidden_size, 8192, 4
    column_out, row_in = 2 * LLAMA.ffn_hidden_size / tp, LLAMA.ffn_hidden_size / tp
    x = layer_shape(FP8_JOB, SP4)
    fwd, _ = fp8_pair_s(GB200, x, h, column_out, row_in, "tensorwise", False, norm_returned=True)
    want = fp8_quantize_time_s(GB200, t / tp * h, 2, recipe="tensorwise", norm="separate")
    want += fp8_quantize_time_s(GB200, t * h, 2, recipe="tensorwise", copies=1)
    want += fp8_quantize_time_s(GB200, t * row_in, 2, recipe="tensorwise")
    assert fwd == pytest.approx(want)


def wgrad_tail(options, second=(8192, LLAMA.hidden_size, LLAMA.ffn_hidden_size / 4)) -> float:
    """What outlasts the FC2 dgrad ring of FP8_JOB on OVERLAP4 (GB200) of the MXFP8 wgrad
    gradient's send-stream work: its column-wise cast of T/tp x h (read 2, write 1 byte;
    the E8M0 scales come with the cast), the NCCL gather of its scales (T x h / 32) and the
    userbuffers gather of its data (T x h)."""
    h, t = LLAMA.hidden_size, 8192
    groups = comm_groups(plan_placements(GB200, OVERLAP4, RankPacking(gpus_per_node=4)))
    cast = memory_bound_time_s(GB200, 3 * t / 4 * h)
    comm = collective_time_s(GB200, "all_gather", t * h / 32, groups.tp)
    comm += collective_time_s(GB200, "all_gather", t * h, groups.tp)
    m, n, k = second
    return ring_send_tail_s(GB200, 4, "fp8", t * h, groups.tp, (m, k, n), cast + comm)


def test_mxfp8_userbuffers_cast_the_output_gradient_twice():
    # TE _Linear.backward under ub_overlap_ag: grad_output_preprocess casts the 16-bit
    # gradient row-wise alone (Userbuffers "can only communicate one MXFP8 buffer at a
    # time"), then the wgrad's column-wise copy is cast again from it on the dgrad send
    # stream. The compute stream writes one copy of T/tp x h (1 byte less per element); the
    # second cast runs on the send stream, exposed only where it outlasts the dgrad GEMM.
    h, t, tp = LLAMA.hidden_size, 8192, 4
    column_out, row_in = 2 * LLAMA.ffn_hidden_size / tp, LLAMA.ffn_hidden_size / tp
    x = layer_shape(FP8_JOB, OVERLAP4)
    _, nccl = fp8_pair_s(GB200, x, h, column_out, row_in, "mxfp8", False)
    _, ub = fp8_pair_s(GB200, x, h, column_out, row_in, "mxfp8", False, userbuffers=True)
    assert nccl - ub == pytest.approx(memory_bound_time_s(GB200, t / tp * h))
    _, frozen = fp8_pair_s(GB200, x, h, column_out, row_in, "mxfp8", False, frozen=True)
    _, frozen_ub = fp8_pair_s(
        GB200, x, h, column_out, row_in, "mxfp8", False, frozen=True, userbuffers=True
    )
    assert frozen_ub == frozen
    # A 256-wide FC2 dgrad is shorter than the send-stream work: the tail is exposed.
    groups = comm_groups(plan_placements(GB200, OVERLAP4, RankPacking(gpus_per_node=4)))
    mx = dataclasses.replace(DEFAULT_OPTIONS, fp8_recipe="mxfp8")
    cs = dataclasses.replace(DEFAULT_OPTIONS, fp8_recipe="tensorwise")
    first, narrow = (t, 512, h), (t, h, 256)
    _, mx_b = tp_pair(GB200, OVERLAP4, x, h, groups, first, narrow, mx)
    _, cs_b = tp_pair(GB200, OVERLAP4, x, h, groups, first, narrow, cs)
    scale = collective_time_s(GB200, "all_gather", t * h / 32, groups.tp)
    tail = wgrad_tail(mx, narrow)
    assert tail > 0
    assert mx_b.tp_exposed_s - cs_b.tp_exposed_s == pytest.approx(2 * scale + tail)


def test_attention_projection_quantizes_its_saved_input_again_for_wgrad():
    # Megatron-core set_save_original_input(linear_proj) under fp4 (TE >= 2.7) and fp8 other
    # than delayed (TE >= 2.6); TE _Linear.forward casts the input row-wise alone and
    # _Linear.backward quantizes the saved 16-bit input again: NVFP4 column-wise (Hadamard
    # cast, e + 0.5625 bytes per element, after its amax read of e). Forward: one NVFP4 copy
    # (0.5625 bytes) less per T x q element.
    h, t, tp = LLAMA.hidden_size, 8192, 4
    q = LLAMA.num_attention_heads * LLAMA.head_dim / tp
    column_out = (LLAMA.num_attention_heads + 2 * LLAMA.query_groups) * LLAMA.head_dim / tp
    x = layer_shape(NVFP4_JOB, SP4)
    plain = fp8_pair_s(GB200, x, h, column_out, q, "delayed", False)
    saved = fp8_pair_s(GB200, x, h, column_out, q, "delayed", False, row_saves_input=True)
    assert plain[0] - saved[0] == pytest.approx(memory_bound_time_s(GB200, 0.5625 * t * q))
    again = memory_bound_time_s(GB200, (2 + 0.5625) * t * q) + memory_bound_time_s(GB200, 2 * t * q)
    assert saved[1] - plain[1] == pytest.approx(again)
    # A frozen projection has no wgrad GEMM to quantize for; delayed scaling saves no input.
    frozen = fp8_pair_s(GB200, x, h, column_out, q, "delayed", False, frozen=True)
    assert fp8_pair_s(
        GB200, x, h, column_out, q, "delayed", False, frozen=True, row_saves_input=True
    ) == pytest.approx(frozen)
    x8 = layer_shape(FP8_JOB, SP4)
    assert fp8_pair_s(GB200, x8, h, column_out, q, "delayed", False, row_saves_input=True) == (
        fp8_pair_s(GB200, x8, h, column_out, q, "delayed", False)
    )


def test_lora_column_pair_gathers_through_nccl_under_userbuffers():
    # A LoRA adapter on QKV or FC1 sets return_layernorm_output (Megatron-Bridge
    # peft/utils.py, v0.5.0) and TE's _LayerNormLinear.forward then turns ub_overlap_ag_fprop
    # off: the quantized norm output (1 byte per element under current scaling) is gathered
    # by a blocking NCCL all-gather before the whole GEMM, not by the ring exchange; it is
    # quantized on its T/tp rows only (no gathered 16-bit copy to quantize again).
    h, t, tp = LLAMA.hidden_size, 8192, 4
    x = layer_shape(FP8_JOB, OVERLAP4)
    groups = comm_groups(plan_placements(GB200, OVERLAP4, RankPacking(gpus_per_node=4)))
    first, second = (t, 2 * LLAMA.ffn_hidden_size / tp, h), (t, h, LLAMA.ffn_hidden_size / tp)
    cs = dataclasses.replace(DEFAULT_OPTIONS, fp8_recipe="tensorwise")
    fwd, bwd = tp_pair(
        GB200, OVERLAP4, x, h, groups, first, second, cs, frozen=True, norm_returned=True
    )
    ag = collective_time_s(GB200, "all_gather", t * h, groups.tp)
    want = tp_overlap_pair_s(
        GB200, 4, "fp8", t * h * 2, groups.tp, first, second, options=cs, gather_bytes=t * h
    )
    ring = tp_overlap_pair_s(
        GB200,
        4,
        "fp8",
        t * h * 2,
        groups.tp,
        first,
        second,
        options=cs,
        gather_bytes=t * h,
        first_gather_s=ag,
    )
    assert fwd.tp_exposed_s == pytest.approx(ring[0])
    assert fwd.tp_exposed_s > want[0]
    assert bwd.tp_exposed_s == pytest.approx(want[1])
    column_out, row_in = first[1], second[2]
    quantized = fp8_pair_s(
        GB200, x, h, column_out, row_in, "tensorwise", False, frozen=True, norm_returned=True
    )
    on_userbuffers = fp8_pair_s(
        GB200,
        x,
        h,
        column_out,
        row_in,
        "tensorwise",
        False,
        frozen=True,
        norm_returned=True,
        userbuffers=True,
    )
    again = fp8_quantize_time_s(GB200, t * h, 2, recipe="tensorwise", copies=1)
    assert quantized[0] - on_userbuffers[0] == pytest.approx(again)
