"""The NVLink segment in the exports of an NVL72 plan (`planner.export_segment`): SLURM
``--segment=N`` where the plan was priced in segments of N servers, a comment alone where
it was priced in racks filled in order, nothing on one-server domains."""

from __future__ import annotations

import tomllib

from planner.export import megatron_command
from planner.export_torchtitan import torchtitan_toml
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from specs.rules import check_plan

PLAN = ParallelPlan(tp=1, pp=2, dp=64, ep=16, distributed_optimizer=True)


def _bundle(hardware: str = "gb200-nvl72", segment: int | None = None) -> PlanBundle:
    bundle = PlanBundle(
        model=get_preset("qwen3-30b-a3b"),
        cluster=ClusterSpec(hardware=hardware, num_gpus=128, nvlink_segment_nodes=segment),
        job=TrainingJob(seq_length=4096, global_batch_size=512),
        plan=PLAN,
    )
    assert check_plan(bundle.model, bundle.cluster, bundle.job, bundle.plan) == []
    return bundle


def _header(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("#")]


def test_megatron_export_gives_slurm_the_launcher_segment() -> None:
    header = _header(megatron_command(_bundle(), 4))
    # 32 trays: Megatron-Bridge's launcher takes segments of 16 (the largest divisor <= 18)
    assert "#SBATCH --segment=16" in header
    assert any(
        "segments of 16 servers x 4 GPUs (64 GPUs, Megatron-Bridge's launcher rule)" in line
        for line in header
    )


def test_megatron_export_gives_slurm_the_plans_segment() -> None:
    text = megatron_command(_bundle(segment=8), 4)
    assert "#SBATCH --segment=8" in _header(text)
    assert "the plan's nvlink_segment_nodes 8" in text


def test_racks_filled_in_order_take_no_segment() -> None:
    text = megatron_command(_bundle(segment=18), 4)
    assert "#SBATCH" not in text
    assert "racks of 18 servers x 4 GPUs (72 GPUs" in text and "without --segment" in text


def test_one_server_domains_name_no_segment() -> None:
    text = megatron_command(_bundle(hardware="b200"), 8)
    assert "segment" not in text and "#SBATCH" not in text


def test_torchtitan_export_names_the_segment_in_a_comment() -> None:
    text = torchtitan_toml(_bundle())
    assert "#SBATCH" not in text
    assert "--segment=16" in "\n".join(_header(text))
    tomllib.loads(text)
