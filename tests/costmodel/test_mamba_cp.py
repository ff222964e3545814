"""Context parallelism of a Mamba-2 mixer (`costmodel.runtimes.megatron.mamba_cp`, its use
in `mamba_costs.mamba_block` and `costmodel.mamba_activations.mamba_tensors`).

Golden byte counts are worked by hand for the Nemotron-H 8B-like spec of
`tests.costmodel.test_mamba_costs` (h 4096, H 128 heads of P 64, d_inner 8192, G 8
groups, N 128) from Megatron-LM d98e8a64 ``megatron/core/ssm/mamba_context_parallel.py``:
`MambaContextParallel.pre_conv_ssm` sends z, x, B, C and dt of the rank's s/cp tokens
through `_all_to_all_cp2hp` (B and C repeated per group when G/tp < cp) and
`post_conv_ssm` sends the scan output y through `_all_to_all_hp2cp`.
"""

from __future__ import annotations

import numpy as np
import pytest

from costmodel.activation_shard import activation_shard
from costmodel.estimate import estimate_plan
from costmodel.mamba_activations import mamba_tensors
from costmodel.runtimes.megatron.layer_shape import layer_shape
from costmodel.runtimes.megatron.mamba_costs import ssd_chunks, ssd_gemms, ssd_scan_s
from costmodel.runtimes.megatron.mamba_cp import CP_EXCHANGES, cp_all_to_all_bytes, scan_shape
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from specs.rules import check_plan
from tests.costmodel.test_mamba_costs import H100, NEMOTRON_H_8B, block
from tests.costmodel.test_screen import HYBRID_GRID, compare, valid_plans


def shape(seq: int, **plan):
    job = TrainingJob(seq_length=seq, global_batch_size=64)
    return layer_shape(job, ParallelPlan(**plan))


def test_golden_all_to_all_bytes_tp1_cp2() -> None:
    # s 8192 over cp 2: T = 4096 tokens of the rank's shard, bf16 (2 bytes)
    sizes = cp_all_to_all_bytes(NEMOTRON_H_8B, shape(8192, cp=2))
    assert list(sizes) == list(CP_EXCHANGES)
    assert sizes == {
        "z": 2 * 4096 * 8192,  # 67,108,864: [s/cp, b, d_inner/tp]
        "x": 2 * 4096 * 8192,
        "B": 2 * 4096 * 8 * 128,  # 8,388,608: G/tp = 8 >= cp, no repeat: [s/cp, b, G·N]
        "C": 2 * 4096 * 8 * 128,
        "dt": 2 * 4096 * 128,  # 1,048,576: [s/cp, b, H/tp]
        "y": 2 * 8192 * 4096,  # 67,108,864: [s, b, d_inner/(tp·cp)]
    }
    assert sum(sizes.values()) == 219_152_384


def test_golden_all_to_all_bytes_with_repeated_groups() -> None:
    # tp 4, cp 4, s 8192: T = 2048; G/tp = 2 < cp 4, so each group's B and C are repeated
    # group_repeat_count = 4 / 2 = 2 times before the exchange: width 2·2·128 = 512
    sizes = cp_all_to_all_bytes(NEMOTRON_H_8B, shape(8192, tp=4, cp=4))
    assert sizes == {
        "z": 2 * 2048 * 2048,  # 8,388,608: d_inner/tp = 2048
        "x": 2 * 2048 * 2048,
        "B": 2 * 2048 * 512,  # 2,097,152 (1,048,576 without the repeat)
        "C": 2 * 2048 * 512,
        "dt": 2 * 2048 * 32,  # 131,072: H/tp = 32
        "y": 2 * 8192 * 512,  # 8,388,608: d_inner/(tp·cp) = 512 over the whole sequence
    }
    assert cp_all_to_all_bytes(NEMOTRON_H_8B, shape(8192, tp=4)) == {}


def test_block_carries_the_exchanges_exposed_each_way() -> None:
    (forward, backward, _, _, _), _ = block(seq=8192, cp=2)
    assert forward.cp_bytes == backward.cp_bytes == 219_152_384
    assert forward.cp_exposed_s == forward.cp_s > 0
    assert backward.cp_exposed_s == backward.cp_s == forward.cp_s
    (one_fwd, one_bwd, _, _, _), _ = block(seq=8192)
    assert one_fwd.cp_s == one_bwd.cp_s == one_fwd.cp_bytes == 0


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_scan_at_cp2_is_the_scan_at_tp_doubled(tp: int) -> None:
    # H/(tp·2) heads and G/(tp·2) groups over the whole sequence either way (G/tp >= 2
    # here, so no group is repeated): the same batched GEMMs and the same seconds
    cp2, tp2 = shape(8192, tp=tp, cp=2), shape(8192, tp=2 * tp)
    for direction in ("forward", "backward"):
        assert ssd_gemms(NEMOTRON_H_8B, cp2, direction) == ssd_gemms(NEMOTRON_H_8B, tp2, direction)
    assert ssd_scan_s(NEMOTRON_H_8B, H100, cp2) == ssd_scan_s(NEMOTRON_H_8B, H100, tp2)


def test_scan_runs_the_whole_sequence_under_cp() -> None:
    x = shape(8192, cp=4)
    assert x.tokens == 2048 and scan_shape(x).tokens == 8192
    assert ssd_chunks(scan_shape(x)) == (8192 // 128, 128)
    heads = ssd_gemms(NEMOTRON_H_8B, x, "forward")["chunk_state"].batch
    assert heads == 64 * 128 // 4  # 64 chunks of the sequence, 32 heads of the rank


def test_saved_tensors_under_cp() -> None:
    job = TrainingJob(seq_length=8192, global_batch_size=64)
    one = mamba_tensors(NEMOTRON_H_8B, activation_shard(job, ParallelPlan(), False))
    two = mamba_tensors(NEMOTRON_H_8B, activation_shard(job, ParallelPlan(cp=2), False))
    # zxBCdt after the all-to-all: s = 8192 tokens, 2·4096 + 2·4·128 + 64 = 9280 channels
    assert two["in_proj_output"] == 2 * 8192 * 9280
    assert two["ssd_output"] == 2 * 8192 * 4096  # out_x: whole sequence, d_inner/cp
    assert two["gated_norm_input"] == 2 * 4096 * 8192  # after the exchange back: T = s/cp
    assert sum(two.values()) < sum(one.values())


def test_peak_memory_at_cp2_is_below_cp1() -> None:
    model = get_preset("nemotron-h-8b")
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=8)
    job = TrainingJob(seq_length=32768, global_batch_size=8)
    peaks = []
    for cp in (1, 2):
        plan = ParallelPlan.for_world(8, tp=4, cp=cp, sequence_parallel=True)
        assert check_plan(model, cluster, job, plan) == []
        peaks.append(estimate_plan(model, cluster, job, plan, H100).peak_memory_bytes)
    assert peaks[1] < peaks[0]


def test_screen_agrees_with_the_simulator_under_cp() -> None:
    # every 4th plan of the hybrid grid with cp 2: the screen's layer costs carry the same
    # all-to-alls and layout copies as the simulated estimate
    model = get_preset("nemotron-h-8b")
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=32)
    job = TrainingJob(seq_length=8192, global_batch_size=64)
    plans = [p for p in valid_plans(model, cluster, job, HYBRID_GRID) if p.cp == 2][::4]
    assert len(plans) > 20
    time_err, mem_err = compare(model, cluster, job, plans)
    assert np.max(time_err) < 0.05
    assert np.max(mem_err) < 0.05
