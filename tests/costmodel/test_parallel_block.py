"""The parallel attention+MLP block (``ModelSpec.layer_block``) in the Megatron runtime:
FLOPs, the TP collectives of a layer, its element-wise work and the activations it keeps
(costmodel.runtimes.megatron.layer_costs, linear_pairs, layer_shape;
costmodel.layer_activations).

Source of every count: EleutherAI/gpt-neox ``megatron/model/transformer.py``,
``ParallelTransformerLayer`` (``gpt_j_residual``), and ``megatron/mpu/layers.py``
(``ColumnParallelLinear.forward``, ``RowParallelLinear.forward``)."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.collectives import collective_time_s
from costmodel.compute import memory_bound_time_s, norm_time_s, residual_time_s
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.iteration_flops import job_model_flops_per_iteration, sc21_flops_per_iteration
from costmodel.layer_activations import kind_activations
from costmodel.runtimes.megatron.layer_costs import layer_passes
from costmodel.runtimes.megatron.layer_shape import block_elementwise_s, intra_groups, layer_shape
from costmodel.runtimes.megatron.linear_pairs import tp_pair
from costmodel.topology import strided_group_placement
from profiles.store import load_profile
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.layer_kinds import DENSE_LAYER
from specs.plan import ParallelPlan
from specs.presets import get_preset

A100 = load_profile("a100-sxm-40gb")
NEOX = get_preset("gpt-neox-20b")
SEQUENTIAL = NEOX.replace(layer_block="sequential")
SHARED = NEOX.replace(layer_block="parallel_shared_norm")
JOB = TrainingJob(seq_length=2048, global_batch_size=1536)
# S = T·h·e = 1·2048 tokens x 6144 x 2 bytes: the full activation one TP collective of a
# microbatch of 1 carries.
S_BYTES = 2048 * 6144 * 2
TP2 = strided_group_placement(2, 1, gpus_per_node=8, scale_up_domain=8, nics_per_node=8)


def passes(model, plan: ParallelPlan, options=DEFAULT_OPTIONS):
    return layer_passes(model, JOB, plan, A100, kind=DENSE_LAYER, options=options)


def test_flops_equal_the_sequential_blocks():
    # the same four GEMMs and attention core: x + attn(ln1(x)) + mlp(ln2(x)) runs what
    # x' = x + attn(ln1(x)); x' + mlp(ln2(x')) runs
    for model in (NEOX, SHARED):
        assert job_model_flops_per_iteration(model, JOB) == job_model_flops_per_iteration(
            SEQUENTIAL, JOB
        )
        assert sc21_flops_per_iteration(model, 2048, 1536) == sc21_flops_per_iteration(
            SEQUENTIAL, 2048, 1536
        )


def test_one_all_reduce_forward_two_backward_without_sp():
    # forward: attention and MLP RowParallelLinear with parallel_output=True skip
    # reduce_from_model_parallel_region (mpu/layers.py ~775-782); the layer reduces
    # attention_output + mlp_output once, `output = residual + self.reduce(output)`
    # (transformer.py ~1112). Backward: reduce_from_model_parallel_region's backward is the
    # identity; each ColumnParallelLinear's copy_to_model_parallel_region (QKV on x1, FC1 on
    # x2, mpu/layers.py ~563) all-reduces its input gradient: two all-reduces.
    plan = ParallelPlan(tp=2, sequence_parallel=False, micro_batch_size=1)
    ar = collective_time_s(A100, "all_reduce", S_BYTES, TP2)
    for model in (NEOX, SHARED):
        p = passes(model, plan)
        assert p.forward.tp_s == pytest.approx(ar)
        assert p.forward.tp_bytes == pytest.approx(S_BYTES)
        assert p.backward.tp_s == pytest.approx(2 * ar)
    seq = passes(SEQUENTIAL, plan)
    assert seq.forward.tp_s == pytest.approx(2 * ar)
    assert seq.forward.tp_bytes == pytest.approx(2 * S_BYTES)
    assert passes(NEOX, plan).backward.tp_bytes == seq.backward.tp_bytes


def test_sequence_parallel_reduces_with_one_reduce_scatter():
    # with sequence_parallel the layer's reduce is reduce_scatter_to_sequence_parallel_region
    # (transformer.py ~947-952). Forward: each ColumnParallelLinear gathers its own input
    # (gather_from_sequence_parallel_region, mpu/layers.py ~567-573): 2 all-gathers, then
    # 1 reduce-scatter. Backward: the reduce-scatter's backward is 1 all-gather of the
    # output gradient; each gather's backward is a reduce-scatter: 2 reduce-scatters.
    plan = ParallelPlan(tp=2, sequence_parallel=True, micro_batch_size=1)
    ag = collective_time_s(A100, "all_gather", S_BYTES, TP2)
    rs = collective_time_s(A100, "reduce_scatter", S_BYTES, TP2)
    p = passes(NEOX, plan)
    assert p.forward.tp_s == pytest.approx(2 * ag + rs)
    assert p.forward.tp_bytes == pytest.approx(3 * S_BYTES)
    assert p.backward.tp_s == pytest.approx(ag + 2 * rs)
    assert p.backward.tp_bytes == pytest.approx(3 * S_BYTES)
    seq = passes(SEQUENTIAL, plan)
    assert seq.forward.tp_bytes == pytest.approx(4 * S_BYTES)
    assert seq.backward.tp_bytes == pytest.approx(4 * S_BYTES)


def test_deferred_reduction_has_no_userbuffers_overlap():
    plan = ParallelPlan(tp=2, sequence_parallel=True, tp_comm_overlap=True, micro_batch_size=1)
    x, shape = layer_shape(JOB, plan), (2048.0, 12288.0, 6144)
    with pytest.raises(SpecError, match="parallel_block_not_with_tp_comm_overlap"):
        tp_pair(A100, plan, x, 6144, intra_groups(plan), shape, shape, row_reduction=False)


def test_gemm_and_core_time_match_the_sequential_block():
    # only collectives and element-wise kernels differ: at tp 1, no dropout and no bias the
    # two-norm block runs the sequential block's kernels (2 norms, 2 three-operand adds)
    plan = ParallelPlan(tp=1, micro_batch_size=1)
    no_bias = NEOX.replace(add_bias_linear=False)
    seq = passes(no_bias.replace(layer_block="sequential"), plan)
    par = passes(no_bias, plan)
    assert par.forward.compute_s == pytest.approx(seq.forward.compute_s)
    assert par.backward.compute_s == pytest.approx(seq.backward.compute_s)


def test_shared_norm_runs_one_norm_fewer():
    plan = ParallelPlan(tp=2, sequence_parallel=True, micro_batch_size=1)
    x = layer_shape(JOB, plan)
    for part in ("attention", "mlp"):
        two = block_elementwise_s(A100, x, NEOX, DEFAULT_OPTIONS, part)
        one = block_elementwise_s(A100, x, SHARED, DEFAULT_OPTIONS, part)
        if part == "attention":
            assert one == two
        else:
            assert one[0] < two[0] and one[1] < two[1]


def test_branch_dropouts_run_on_unreduced_tokens():
    # bias_dropout_fn(attention_output, residual=None) before self.reduce (transformer.py
    # ~1085-1093): T rows on every rank (read and write 2 bytes, write a 1-byte mask);
    # the norm reads the sequence-parallel shard, T/tp rows
    dropout = dataclasses.replace(DEFAULT_OPTIONS, hidden_dropout=True)
    sp = layer_shape(JOB, ParallelPlan(tp=2, sequence_parallel=True, micro_batch_size=1))
    forward, _ = block_elementwise_s(A100, sp, NEOX, dropout, "attention")
    norm = norm_time_s(A100, 1024, 6144, 2, "forward")
    branch = memory_bound_time_s(A100, (2 * 2 + 1) * 2048 * 6144)
    assert forward == pytest.approx(norm + branch)
    # the MLP part: its bias-dropout-add onto the attention branch on T rows, the
    # residual add after the reduce-scatter on T/tp rows, the second norm on T/tp rows
    forward, _ = block_elementwise_s(A100, sp, NEOX, dropout, "mlp")
    bda = residual_time_s(A100, 2048, 6144, 2, "forward", dropout=True)
    add = residual_time_s(A100, 1024, 6144, 2, "forward")
    assert forward == pytest.approx(norm + bda + add)


def test_activations_keep_the_layer_input_once():
    # transformer.py ~1060-1072: both norms read x (residual = x); the sequential block's
    # second norm reads the attention residual's sum, a tensor of its own (T·h·e)
    plan = ParallelPlan(tp=2, sequence_parallel=False, micro_batch_size=1)
    seq = kind_activations(SEQUENTIAL, JOB, plan, DENSE_LAYER, dropout=False)
    par = kind_activations(NEOX, JOB, plan, DENSE_LAYER, dropout=False)
    shared = kind_activations(SHARED, JOB, plan, DENSE_LAYER, dropout=False)
    assert seq.full_bytes - par.full_bytes == pytest.approx(S_BYTES)
    # gpt_j_tied: x1, x2 = x, x, one norm output for QKV and FC1 (T·h·e kept once)
    assert par.full_bytes - shared.full_bytes == pytest.approx(S_BYTES)
    assert par.input_bytes == seq.input_bytes == S_BYTES


def test_activation_masks_cover_the_unreduced_branches():
    # with SP: the norm input is T/tp rows (S/2), the two 1-byte dropout masks T rows
    # (2048·6144 each), the FC1 input T/tp rows; sequential keeps masks of T/tp rows
    plan = ParallelPlan(tp=2, sequence_parallel=True, micro_batch_size=1)
    par = dict(kind_activations(NEOX, JOB, plan, DENSE_LAYER, dropout=True).tensors)
    seq = dict(kind_activations(SEQUENTIAL, JOB, plan, DENSE_LAYER, dropout=True).tensors)
    assert par["attn_mask"] == par["mlp_mask"] == 2048 * 6144
    assert seq["attn_mask"] == seq["mlp_mask"] == 2048 * 6144 / 2
    assert par["mlp_norm_input"] == 0 and seq["mlp_norm_input"] == S_BYTES / 2
    assert par["fc1_input"] == seq["fc1_input"] == S_BYTES / 2


def test_fp8_shared_norm_keeps_fc1s_own_copy():
    plan = ParallelPlan(tp=2, sequence_parallel=True, micro_batch_size=1)
    fp8 = dataclasses.replace(JOB, precision="fp8")
    par = dict(kind_activations(SHARED, fp8, plan, DENSE_LAYER).tensors)
    assert par["fc1_input"] == 2048 * 6144 / 2  # one FP8 byte on T/tp rows
