"""Model against data parallelism on one A100 DGX cluster, Megatron-LM 2021: Narayanan et
al. 2021 (arXiv 2104.04473, SC21), §5.4, Figures 14 and 15 (Takeaway #2: the model-parallel
size should be the smallest that fits, data parallelism scaling the rest). A 5.9B GPT (32
layers, hidden 3840, 32 heads, sequence 2048) on 64 A100 GPUs, micro-batch 1, full
recompute, ``--DDP-impl local``: Figure 14 trades pipeline for data parallelism at tp 1
(pp in 2-32, global batch 32 and 512; ``examples/academic_paper_scripts/sc21/
run_figure_14.sh``), Figure 15 tensor for data parallelism at pp 1 (tp in 2-32, global batch
32, 128 and 512; ``run_figure_15.sh``). In both the throughput per GPU falls as the
model-parallel degree grows, at every batch size. Trust C (points read off the figures):
the check is that order, which the search sanity's tp 4 picks of the 175B rows rest on
(docs/planner.md, search sanity)."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.estimate import estimate_plan
from costmodel.execution_presets import MEGATRON_2021
from profiles.store import load_profile
from specs import ParallelPlan, TrainingJob
from specs.cluster import ClusterSpec
from specs.presets import get_preset

MODEL = dataclasses.replace(
    get_preset("gpt-1.7b"),
    num_layers=32,
    hidden_size=3840,
    num_attention_heads=32,
    num_query_groups=32,
    ffn_hidden_size=4 * 3840,
)
PROFILE = load_profile("a100-sxm-80gb")
CLUSTER = ClusterSpec(hardware="a100-sxm-80gb", num_gpus=64)
DEGREES = (2, 4, 8, 16, 32)


def _tokens_per_s(tp: int, pp: int, batch: int) -> float:
    plan = ParallelPlan(
        tp=tp,
        pp=pp,
        dp=CLUSTER.num_gpus // (tp * pp),
        micro_batch_size=1,
        recompute="full",
        overlap_grad_reduce=False,
    )
    job = TrainingJob(seq_length=2048, global_batch_size=batch, precision="bf16")
    est = estimate_plan(MODEL, CLUSTER, job, plan, PROFILE, options=MEGATRON_2021)
    assert est.fits
    return est.tokens_per_s


@pytest.mark.parametrize("batch", [32, 512])
def test_figure_14_throughput_falls_as_pipeline_parallelism_replaces_data_parallelism(
    batch: int,
) -> None:
    rates = [_tokens_per_s(1, pp, batch) for pp in DEGREES]
    assert rates == sorted(rates, reverse=True)


@pytest.mark.parametrize("batch", [32, 128, 512])
def test_figure_15_throughput_falls_as_tensor_parallelism_replaces_data_parallelism(
    batch: int,
) -> None:
    rates = [_tokens_per_s(tp, 1, batch) for tp in DEGREES]
    assert rates == sorted(rates, reverse=True)
