"""Tensor against pipeline parallelism on one A100 DGX cluster, Megatron-LM 2021:
Narayanan et al. 2021 (arXiv 2104.04473, SC21), §5.4.1, Figure 13 and Takeaway #1: a 162.2B
GPT (32 layers, hidden 20480, 128 heads, sequence 2048) on 64 A100 GPUs at tp x pp = 64,
micro-batch 1, global batch 32 and 128, full recompute, ``--DDP-impl local``
(``examples/academic_paper_scripts/sc21/run_figure_13.sh``). Trust C: the published points
are read off the figure, so the check is the ranking the paper states, not its values: tp 8
(the server size) with pp 8 is the fastest of the (t, p) pairs at both batch sizes."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.estimate import estimate_plan
from costmodel.execution_presets import MEGATRON_2021
from profiles.store import load_profile
from specs import ParallelPlan, TrainingJob
from specs.cluster import ClusterSpec
from specs.presets import get_preset

MODEL = dataclasses.replace(get_preset("gpt-529.6b"), num_layers=32)
PROFILE = load_profile("a100-sxm-80gb")
CLUSTER = ClusterSpec(hardware="a100-sxm-80gb", num_gpus=64)
PAIRS = ((2, 32), (4, 16), (8, 8), (16, 4), (32, 2))


def _tokens_per_s(tp: int, pp: int, batch: int) -> float:
    plan = ParallelPlan(
        tp=tp, pp=pp, dp=1, micro_batch_size=1, recompute="full", overlap_grad_reduce=False
    )
    job = TrainingJob(seq_length=2048, global_batch_size=batch, precision="bf16")
    return estimate_plan(MODEL, CLUSTER, job, plan, PROFILE, options=MEGATRON_2021).tokens_per_s


@pytest.mark.parametrize("batch", [32, 128])
def test_tp8_pp8_is_fastest(batch: int) -> None:
    speeds = {pair: _tokens_per_s(*pair, batch) for pair in PAIRS}
    assert max(speeds, key=speeds.__getitem__) == (8, 8), speeds
