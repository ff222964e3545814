"""One Mamba-2 layer in the Megatron runtime (`costmodel.runtimes.megatron.mamba_costs`).

Golden values are worked by hand for a Nemotron-H 8B-like spec (Hugging Face
``nvidia/Nemotron-H-8B-Base-8K`` config.json: hidden 4096, 52 layers, pattern below,
``ssm_state_size`` 128, ``n_groups`` 8, ``mamba_num_heads`` 128, ``mamba_head_dim`` 64;
Megatron-Bridge ``NemotronHModel8BProvider`` the same), so d_inner = H·P = 8192 = 2h.
"""

from __future__ import annotations

import math
from itertools import pairwise

import pytest

from costmodel.compute import gemm_time_s
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.mamba_activations import mamba_widths
from costmodel.runtimes.megatron.layer_shape import gemm3, intra_groups, layer_shape
from costmodel.runtimes.megatron.mamba_costs import (
    mamba_block,
    projection_shapes,
    ssd_gemms,
    ssd_scan_s,
)
from costmodel.runtimes.megatron.pair_quantization import fp8_pair_s
from profiles.store import load_profile
from specs.finetune import LoraSpec
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan
from tests.costmodel.cpu_fixture import cpu_profile
from tests.costmodel.golden import profile_named

PATTERN = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
"""Nemotron-H 8B's ``hybrid_override_pattern`` (24 M, 4 *, 24 -)."""
NEMOTRON_H_8B = ModelSpec(
    name="nemotron-h-8b-like",
    num_layers=52,
    hidden_size=4096,
    num_attention_heads=32,
    num_query_groups=8,
    kv_channels=128,
    ffn_hidden_size=21504,
    activation="gelu",
    vocab_size=131072,
    hybrid_layer_pattern=PATTERN,
    mamba_num_heads=128,
)
TINY = ModelSpec(
    name="tiny-hybrid",
    num_layers=2,
    hidden_size=64,
    num_attention_heads=4,
    ffn_hidden_size=128,
    vocab_size=512,
    hybrid_layer_pattern="M*",
    mamba_head_dim=16,
    mamba_state_dim=16,
    mamba_num_groups=2,
)
H100 = load_profile("h100-sxm-80gb")


def block(model=NEMOTRON_H_8B, profile=H100, *, seq=4096, precision="bf16", lora=None, **plan):
    job = TrainingJob(seq_length=seq, global_batch_size=64, precision=precision, lora=lora)
    p = ParallelPlan(**plan)
    x = layer_shape(job, p)
    return mamba_block(model, job, p, profile, x, intra_groups(p), DEFAULT_OPTIONS), x


def shape(seq=4096, tp=1, micro_batch_size=1, precision="bf16"):
    job = TrainingJob(seq_length=seq, global_batch_size=64, precision=precision)
    return layer_shape(job, ParallelPlan(tp=tp, micro_batch_size=micro_batch_size))


def flops(shapes) -> float:
    return sum(2 * m * n * k for m, n, k in shapes)


def test_in_proj_width_and_conv_channels_of_nemotron_h_8b() -> None:
    # MambaMixer.__init__: in_proj out = 2·d_inner + 2·G·N + H = 16384 + 2048 + 128;
    # conv_dim = d_inner + 2·G·N = 8192 + 2048; tp 2 holds half the heads and groups.
    w = mamba_widths(NEMOTRON_H_8B, 1)
    assert (w.inner, w.conv_channels, w.in_proj) == (8192, 10240, 18560)
    w2 = mamba_widths(NEMOTRON_H_8B, 2)
    assert (w2.heads, w2.groups, w2.inner, w2.conv_channels, w2.in_proj) == (
        64,
        4,
        4096,
        5120,
        9280,
    )


def test_projection_flops_are_megatrons_in_and_out_proj_terms() -> None:
    # megatron/training/training.py mamba_layer_flops, with d_in = 2h = 8192:
    # in_proj 2·T·h·(2·d_in + 2·G·N + H) = 2·4096·18560 = 152,043,520 per token,
    # out_proj 2·T·d_in·h = 2·8192·4096 = 67,108,864 per token: 219,152,384 per token.
    x = shape(seq=4096)
    assert flops(projection_shapes(NEMOTRON_H_8B, x)) == 219_152_384 * 4096


def test_ssd_gemm_flops_by_hand() -> None:
    # Per token on one rank, H = 128, G = 8, P = 64, N = 128, Q = 128 (s a multiple of Q):
    # forward chunk_state, scan_states, scan_intra 2·H·P·N = 2·H·Q·P = 2,097,152 each,
    # chunk_cb 2·G·Q·N = 262,144: 6,553,600. Backward: eight per-head products of
    # 2,097,152 (chunk_state rerun, dstates, dx_states, dx_intra, db_states, dc_states,
    # dcb, dda_intra) and three per-group of 262,144 (chunk_cb rerun, db_intra,
    # dc_intra): 17,563,648.
    x = shape(seq=4096)
    forward = sum(g.flops for g in ssd_gemms(NEMOTRON_H_8B, x, "forward").values())
    backward = sum(g.flops for g in ssd_gemms(NEMOTRON_H_8B, x, "backward").values())
    assert forward == 6_553_600 * 4096
    assert backward == 17_563_648 * 4096


def test_tp2_halves_the_gemm_flops() -> None:
    one, two = shape(tp=1), shape(tp=2)
    assert flops(projection_shapes(NEMOTRON_H_8B, two)) == pytest.approx(
        flops(projection_shapes(NEMOTRON_H_8B, one)) / 2
    )
    for direction in ("forward", "backward"):
        a = sum(g.flops for g in ssd_gemms(NEMOTRON_H_8B, one, direction).values())
        b = sum(g.flops for g in ssd_gemms(NEMOTRON_H_8B, two, direction).values())
        assert b == pytest.approx(a / 2)


def test_a_sequence_shorter_than_a_chunk_is_one_chunk() -> None:
    x = shape(seq=100, micro_batch_size=3)
    cb = ssd_gemms(NEMOTRON_H_8B, x, "forward")["chunk_cb"]
    assert (cb.batch, cb.m, cb.n, cb.k) == (3 * 8, 100, 100, 128)
    x = shape(seq=300)  # ⌈300/128⌉ = 3 chunks of 128
    assert ssd_gemms(NEMOTRON_H_8B, x, "forward")["chunk_cb"].batch == 3 * 8


def test_time_grows_with_tokens() -> None:
    times = [block(seq=s)[0] for s in (1024, 4096, 8192)]
    for shorter, longer in pairwise(times):
        assert longer[0].compute_s > shorter[0].compute_s
        assert longer[1].compute_s > shorter[1].compute_s
    (one, *_), _ = block(micro_batch_size=1)
    (two, *_), _ = block(micro_batch_size=2)
    assert two.compute_s > one.compute_s


def test_fp8_runs_the_projections_in_fp8_and_the_scan_in_bf16() -> None:
    # Only the GEMM dtype of in_proj / out_proj and the quantization differ.
    (bf16_f, *_), x = block(precision="bf16")
    (fp8_f, *_), x8 = block(precision="fp8")
    assert x8.dtype == "fp8"
    assert ssd_scan_s(NEMOTRON_H_8B, H100, x8) == ssd_scan_s(NEMOTRON_H_8B, H100, x)
    in_shape, out_shape = projection_shapes(NEMOTRON_H_8B, x)
    gemms = gemm3(H100, x, *in_shape)[0] + gemm3(H100, x, *out_shape)[0]
    gemms8 = gemm3(H100, x8, *in_shape)[0] + gemm3(H100, x8, *out_shape)[0]
    quantize, _ = fp8_pair_s(H100, x8, 4096, 18560, 8192, DEFAULT_OPTIONS.fp8_recipe, False)
    assert gemms8 < gemms and quantize > 0
    assert fp8_f.compute_s == pytest.approx(bf16_f.compute_s - gemms + gemms8 + quantize)


def test_backward_is_dgrad_plus_wgrad_and_nothing_reruns() -> None:
    (forward, backward, rerun, dgrad, wgrad), x = block(tp=2, sequence_parallel=True)
    assert rerun == {}
    assert backward.compute_s == pytest.approx(dgrad + wgrad)
    in_shape, out_shape = projection_shapes(NEMOTRON_H_8B, x)
    assert wgrad == gemm3(H100, x, *in_shape)[2] + gemm3(H100, x, *out_shape)[2]
    # the TP pair of a column/row linear pair with SP: one all-gather and one
    # reduce-scatter of T·h·e each way
    assert forward.tp_bytes == backward.tp_bytes == 2 * 4096 * 4096 * 2
    (_, lora_b, _, lora_d, lora_w), _ = block(lora=LoraSpec(rank=16), tp=2, sequence_parallel=True)
    assert lora_w == 0 and lora_b.compute_s == pytest.approx(lora_d)


def test_forward_holds_the_projection_gemms_and_the_scan() -> None:
    (forward, *_), x = block()
    in_shape, out_shape = projection_shapes(NEMOTRON_H_8B, x)
    gemms = gemm_time_s(H100, 4096, 18560, 4096, "bf16") + gemm_time_s(
        H100, 4096, 4096, 8192, "bf16"
    )
    assert gemms == gemm3(H100, x, *in_shape)[0] + gemm3(H100, x, *out_shape)[0]
    assert forward.compute_s > gemms + ssd_scan_s(NEMOTRON_H_8B, H100, x)[0]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("seq", [100, 128, 300])
@pytest.mark.parametrize("profile_name", ["synthetic-cpu", "cpu-quick-tiny"])
def test_cpu_profiles_give_finite_positive_times(profile_name, seq, precision) -> None:
    profile = cpu_profile() if profile_name == "synthetic-cpu" else profile_named(profile_name)
    (f, b, _, dgrad, wgrad), _ = block(
        TINY, profile, seq=seq, precision=precision, micro_batch_size=2
    )
    for value in (f.compute_s, b.compute_s, dgrad, wgrad):
        assert math.isfinite(value) and value > 0


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
@pytest.mark.parametrize("tp", [1, 2, 8])
def test_h100_gives_finite_positive_times(precision, tp) -> None:
    (f, b, _, dgrad, wgrad), _ = block(
        precision=precision, tp=tp, sequence_parallel=tp > 1, micro_batch_size=2
    )
    for value in (f.compute_s, b.compute_s, dgrad, wgrad):
        assert math.isfinite(value) and value > 0
    assert (f.tp_s > 0) == (tp > 1)
