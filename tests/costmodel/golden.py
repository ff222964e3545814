"""Golden predictions: the plans `test_golden` re-predicts, and the writer of their fixture.

Two groups of plans. Every plan of the CPU fidelity suite (`bench/fidelity_suite.py`:
timing, coverage and calibration cases, its job of 8 sequences of 128 tokens in fp32) on two
CPU profiles, the stored ``tests/reports/data/cpu-quick-tiny.json`` and the synthetic
`tests.costmodel.cpu_fixture.cpu_profile`, under both runtimes. And Megatron-LM plans on
the stored GPU profiles (`profiles/data`): dense and MoE models, 1F1B and interleaved
pipelines, context parallelism, full and selective recompute, the distributed optimizer,
fp8, and the SC21 framework conventions (`costmodel.execution_presets.MEGATRON_2021`).

The fixture ``data/golden_predictions.json`` holds, per plan, the iteration time, the
breakdown and every stage's memory parts as the cost model computed them when it was
written. It is rewritten with ``python -m tests.costmodel.golden`` (``PYTHONPATH`` at the
repository root) only when a change of the model's numbers is intended.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from costmodel.estimate import estimate_plan, estimate_to_json
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import MEGATRON_2021
from profiles.schema import HardwareProfile
from profiles.store import load_profile
from specs import serde
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.loading import load_model
from specs.plan import ParallelPlan
from tests.bench.bench_loader import load_bench
from tests.costmodel.cpu_fixture import cpu_profile

FIXTURE = Path(__file__).parent / "data" / "golden_predictions.json"
STORED_CPU = Path(__file__).resolve().parents[1] / "reports" / "data" / "cpu-quick-tiny.json"
CPU_PROFILES = ("cpu-quick-tiny", "synthetic-cpu")
"""CPU profiles of the fidelity-suite plans: the stored quick profile and the synthetic one."""

RUNTIME_OPTIONS: dict[str, ExecutionOptions] = {
    "megatron": ExecutionOptions(runtime="megatron"),
    "torch": ExecutionOptions(runtime="torch"),
    "megatron-2021": MEGATRON_2021,
}
"""Execution options by the name the fixture stores."""


def profile_named(name: str) -> HardwareProfile:
    """A profile of the fixture by its stored name."""
    if name == "cpu-quick-tiny":
        return load_profile(str(STORED_CPU))
    if name == "synthetic-cpu":
        return cpu_profile()
    return load_profile(name)


def _megatron_cases() -> list[dict[str, Any]]:
    """Megatron-LM plans on the stored GPU profiles (query groups divisible by tp)."""
    rows = [
        (
            "llama3-8b",
            "h100-sxm-80gb",
            8,
            8192,
            256,
            "bf16",
            dict(tp=2, dp=4, sequence_parallel=True, micro_batch_size=1),
        ),
        (
            "llama3-8b",
            "h100-sxm-80gb",
            16,
            8192,
            256,
            "fp8",
            dict(
                tp=4,
                dp=4,
                sequence_parallel=True,
                distributed_optimizer=True,
                overlap_grad_reduce=True,
                overlap_param_gather=True,
            ),
        ),
        (
            "llama3-70b",
            "h100-sxm-80gb",
            64,
            8192,
            512,
            "bf16",
            dict(tp=8, pp=4, dp=2, sequence_parallel=True, distributed_optimizer=True),
        ),
        (
            "llama3-70b",
            "h100-sxm-80gb",
            64,
            8192,
            512,
            "bf16",
            dict(
                tp=8,
                pp=4,
                vpp=5,
                schedule="interleaved",
                dp=2,
                sequence_parallel=True,
                distributed_optimizer=True,
                overlap_grad_reduce=True,
            ),
        ),
        (
            "llama3-70b",
            "h200-sxm-141gb",
            64,
            32768,
            64,
            "bf16",
            dict(tp=8, cp=4, pp=2, sequence_parallel=True, distributed_optimizer=True),
        ),
        (
            "llama3-70b",
            "b200",
            64,
            8192,
            256,
            "fp8",
            dict(
                tp=4,
                pp=4,
                dp=4,
                sequence_parallel=True,
                recompute="selective",
                distributed_optimizer=True,
            ),
        ),
        (
            "llama2-13b",
            "a100-sxm-80gb",
            32,
            4096,
            256,
            "bf16",
            dict(tp=4, pp=2, dp=4, recompute="full", micro_batch_size=2),
        ),
        (
            "llama2-70b",
            "a100-sxm-80gb",
            64,
            4096,
            256,
            "bf16",
            dict(tp=8, pp=8, recompute="full", recompute_method="block", recompute_num_layers=4),
        ),
        ("gpt-18.4b", "a100-sxm-80gb", 64, 2048, 1024, "bf16", dict(tp=8, pp=2, dp=4)),
        (
            "mixtral-8x7b",
            "h100-sxm-80gb",
            64,
            4096,
            256,
            "bf16",
            dict(tp=2, pp=4, ep=8, dp=8, sequence_parallel=True, distributed_optimizer=True),
        ),
        (
            "qwen3-30b-a3b",
            "h100-sxm-80gb",
            32,
            4096,
            256,
            "bf16",
            dict(
                tp=2,
                ep=8,
                dp=16,
                sequence_parallel=True,
                distributed_optimizer=True,
                overlap_grad_reduce=True,
            ),
        ),
        (
            "qwen3-235b-a22b",
            "h200-sxm-141gb",
            256,
            4096,
            1024,
            "bf16",
            dict(tp=4, pp=2, ep=16, dp=32, sequence_parallel=True, distributed_optimizer=True),
        ),
        ("llama3-8b", "mi300x", 8, 8192, 128, "bf16", dict(dp=8, distributed_optimizer=True)),
        (
            "llama3-8b",
            "h100-sxm-80gb",
            16,
            8192,
            256,
            "bf16",
            dict(tp=2, cp=2, dp=4, sequence_parallel=True, cp_comm_type="all_gather"),
        ),
        (
            "llama3.1-405b",
            "h100-sxm-80gb",
            576,
            8192,
            1152,
            "bf16",
            dict(
                tp=8,
                pp=9,
                vpp=7,
                schedule="interleaved",
                dp=8,
                sequence_parallel=True,
                distributed_optimizer=True,
                overlap_grad_reduce=True,
                overlap_param_gather=True,
            ),
        ),
    ]
    cases = [
        {
            "name": f"{model}-{hw}-{i}",
            "model": model,
            "profile": hw,
            "runtime": "megatron",
            "cluster": {"hardware": hw, "num_gpus": gpus},
            "job": {"seq_length": seq, "global_batch_size": gbs, "precision": precision},
            "plan": serde.to_dict(ParallelPlan(**knobs)),
        }
        for i, (model, hw, gpus, seq, gbs, precision, knobs) in enumerate(rows)
    ]
    cases.append(
        {
            "name": "gpt-18.4b-a100-sc21",
            "model": "gpt-18.4b",
            "profile": "a100-sxm-80gb",
            "runtime": "megatron-2021",
            "cluster": {"hardware": "a100-sxm-80gb", "num_gpus": 256},
            "job": {"seq_length": 2048, "global_batch_size": 1024, "precision": "bf16"},
            "plan": serde.to_dict(ParallelPlan(tp=8, pp=2, dp=16)),
        }
    )
    return cases


def _suite_cases() -> list[dict[str, Any]]:
    """Every fidelity-suite plan on each CPU profile that has as many ranks per machine,
    under each runtime."""
    suite = load_bench("fidelity_suite")
    plans = (*suite.timing_suite(), *suite.coverage_suite(), *suite.CALIBRATION_CASES)
    return [
        {
            "name": f"{case.name}-{profile}-{runtime}",
            "model": case.model,
            "profile": profile,
            "runtime": runtime,
            "cluster": {
                "hardware": profile,
                "num_gpus": case.plan.world_size,
                "gpus_per_node": case.plan.world_size,
            },
            "job": {
                "seq_length": case.seq_length,
                "global_batch_size": suite.GLOBAL_BATCH,
                "precision": "fp32",
            },
            "plan": serde.to_dict(case.plan),
        }
        for case in plans
        for profile in CPU_PROFILES
        for runtime in ("torch", "megatron")
        if case.plan.world_size <= profile_named(profile).topology.gpus_per_node
    ]


def golden_cases() -> list[dict[str, Any]]:
    """The inputs of every golden plan, JSON-ready."""
    return _suite_cases() + _megatron_cases()


def predict(case: dict[str, Any]) -> dict[str, Any]:
    """`costmodel.estimate.estimate_to_json` of one case, with the critical stage."""
    cluster = serde.from_dict(ClusterSpec, case["cluster"])
    job = serde.from_dict(TrainingJob, case["job"])
    plan = serde.from_dict(ParallelPlan, case["plan"])
    est = estimate_plan(
        load_model(case["model"]),
        cluster,
        job,
        plan,
        profile_named(case["profile"]),
        options=RUNTIME_OPTIONS[case["runtime"]],
    )
    return {**estimate_to_json(est), "critical_stage": est.critical_stage}


def write_fixture() -> None:
    """Predict every case and write ``data/golden_predictions.json``."""
    out = [{**case, "prediction": predict(case)} for case in golden_cases()]
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    write_fixture()
