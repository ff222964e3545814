"""The closed-form screen against the event simulator for LoRA jobs
(costmodel.runtimes.megatron.screen): the frozen base's weights, the adapters' gradients,
optimizer state, reductions and step, and the LoRA activations agree plan by plan."""

from __future__ import annotations

import pytest

from specs.cluster import ClusterSpec
from specs.finetune import LoraSpec
from specs.job import TrainingJob
from specs.presets import get_preset
from tests.costmodel.test_screen import compare, valid_plans

GRID = {
    "tp": [1, 2, 8],
    "pp": [1, 2, 4],
    "vpp": [1, 2],
    "micro_batch_size": [1, 2],
    "sequence_parallel": [False, True],
    "recompute": ["none", "selective", "full"],
    "distributed_optimizer": [False, True],
    "overlap_grad_reduce": [False, True],
    "overlap_param_gather": [False, True],
}


@pytest.mark.parametrize(
    ("precision", "lora"),
    [
        ("bf16", LoraSpec(rank=16)),
        ("fp8", LoraSpec(rank=8, targets=("linear_qkv", "linear_fc2"))),
    ],
)
def test_screen_agrees_with_the_simulator_on_lora_jobs(precision: str, lora: LoraSpec) -> None:
    model = get_preset("llama3-8b")
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=32)
    job = TrainingJob(seq_length=4096, global_batch_size=64, precision=precision, lora=lora)
    plans = valid_plans(model, cluster, job, GRID)[::13]
    assert len(plans) > 20
    time_err, mem_err = compare(model, cluster, job, plans)
    assert time_err.max() < 0.05
    assert mem_err.max() < 0.01
