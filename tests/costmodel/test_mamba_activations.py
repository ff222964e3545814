"""Saved activations of one Mamba-2 layer (`costmodel.mamba_activations.mamba_tensors`).

Golden bytes are worked by hand for the Nemotron-H 8B-like spec of
`tests.costmodel.test_mamba_costs` (h 4096, H 128, P 64, N 128, G 8: d_inner 8192, in_proj
width 18560) at s = 4096, b = 1, bf16 (e = 2), from the tensors Megatron-core's training
path keeps: the fused pre-norm's input and output (TE ``LayerNormColumnParallelLinear``),
``zxbcdt`` and ``out_x`` (mamba_ssm ``MambaSplitConv1dScanCombinedFn.forward``,
``ctx.save_for_backward``), the grouped RMSNorm's input and fp32 rstd (mamba_ssm
``layernorm_gated.LayerNormFn.forward``) and the output projection's input.
"""

from __future__ import annotations

import pytest

from costmodel.activation_savers import (
    OFFLOAD_TENSORS,
    RECOMPUTE_TENSORS,
    offloaded_bytes,
    recomputed_bytes,
)
from costmodel.activation_shard import activation_shard
from costmodel.mamba_activations import MAMBA_TENSOR_NAMES, mamba_tensors
from specs.finetune import LoraSpec
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from tests.costmodel.test_mamba_costs import NEMOTRON_H_8B

T, H, D_INNER, IN_PROJ = 4096, 4096, 8192, 18560


def tensors(precision="bf16", dropout=False, lora=None, **plan) -> dict[str, float]:
    job = TrainingJob(seq_length=T, global_batch_size=64, precision=precision, lora=lora)
    return mamba_tensors(NEMOTRON_H_8B, activation_shard(job, ParallelPlan(**plan), dropout))


def test_golden_bytes_of_nemotron_h_8b_at_tp1() -> None:
    t = tensors()
    assert t == {
        "mamba_norm_input": 2 * T * H,  # 33,554,432
        "in_proj_input": 2 * T * H,
        "mamba_mask": 0,  # no hidden dropout
        "in_proj_output": 2 * T * IN_PROJ,  # 152,043,520
        "ssd_output": 2 * T * D_INNER,  # 67,108,864
        "gated_norm_input": 2 * T * D_INNER,
        "gated_norm_rstd": 4 * T * 8,  # 131,072
        "out_proj_input": 2 * T * D_INNER,
    }
    # h·(2 + 2) + 2·18560 + 3·2·8192 + 4·8 = 102,688 bytes per token
    assert sum(t.values()) == 420_610_048 == 102_688 * T
    assert tuple(t) == MAMBA_TENSOR_NAMES


def test_sequence_parallelism_shrinks_only_the_hidden_sized_tensors() -> None:
    sp, plain = tensors(tp=2, sequence_parallel=True), tensors(tp=2)
    hidden = {"mamba_norm_input", "in_proj_input"}
    for name in MAMBA_TENSOR_NAMES:
        if name in hidden:
            assert sp[name] == plain[name] / 2 == T * H
        else:
            assert sp[name] == plain[name]
    assert sp["mamba_mask"] == 0


def test_tp_splits_the_mixer_tensors() -> None:
    one, two = tensors(), tensors(tp=2)
    for name in ("in_proj_output", "ssd_output", "gated_norm_input", "gated_norm_rstd"):
        assert two[name] == one[name] / 2
    assert two["mamba_norm_input"] == one["mamba_norm_input"]  # no SP: the whole sequence


def test_fp8_keeps_one_byte_copies_of_the_gemm_inputs_only() -> None:
    fp8, bf16 = tensors("fp8"), tensors()
    assert fp8["in_proj_input"] == T * H
    assert fp8["out_proj_input"] == T * D_INNER
    for name in set(MAMBA_TENSOR_NAMES) - {"in_proj_input", "out_proj_input"}:
        assert fp8[name] == bf16[name]


def test_dropout_keeps_a_one_byte_mask_of_the_residual_branch() -> None:
    assert tensors(dropout=True)["mamba_mask"] == T * H
    assert tensors(dropout=True, tp=4, sequence_parallel=True)["mamba_mask"] == T * H / 4


def test_a_frozen_lora_base_keeps_no_projection_inputs() -> None:
    lora, full = tensors(lora=LoraSpec(rank=16)), tensors()
    assert lora["in_proj_input"] == lora["out_proj_input"] == 0
    for name in set(MAMBA_TENSOR_NAMES) - {"in_proj_input", "out_proj_input"}:
        assert lora[name] == full[name]


def test_no_recompute_or_offload_module_frees_a_mamba_tensor() -> None:
    saved = tuple(tensors().items())
    assert recomputed_bytes(saved, RECOMPUTE_TENSORS) == 0
    assert offloaded_bytes(saved, OFFLOAD_TENSORS) == 0
    assert sum(v for _, v in saved) == pytest.approx(420_610_048)
