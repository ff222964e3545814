"""The MoE router in the Megatron-LM export (planner.export.router_arguments): the exact
flags of each preset's router, as Megatron-LM spells them (megatron/training/arguments.py,
Megatron-LM d98e8a64), inside the full argument list."""

from __future__ import annotations

import pytest

from planner.export import megatron_arguments, router_arguments
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from specs.router import RouterSpec

DEEPSEEK_STYLE = [
    "--moe-router-score-function", "sigmoid",
    "--moe-router-pre-softmax",
    "--moe-router-enable-expert-bias",
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            # Megatron-LM examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh trains the same
            # router (its aux-loss coefficient 1e-4 is the paper's; config.json has 0.001).
            "deepseek-v3",
            [
                *DEEPSEEK_STYLE,
                "--moe-router-num-groups", "8",
                "--moe-router-group-topk", "4",
                "--moe-router-topk-scaling-factor", "2.5",
                "--moe-router-load-balancing-type", "seq_aux_loss",
                "--moe-aux-loss-coeff", "0.001",
                "--moe-router-dtype", "fp32",
            ],
        ),
        (
            "kimi-k2",
            [
                *DEEPSEEK_STYLE,
                "--moe-router-num-groups", "1",
                "--moe-router-group-topk", "1",
                "--moe-router-topk-scaling-factor", "2.827",
                "--moe-router-load-balancing-type", "seq_aux_loss",
                "--moe-aux-loss-coeff", "0.001",
                "--moe-router-dtype", "fp32",
            ],
        ),
        ("qwen3-30b-a3b", ["--moe-aux-loss-coeff", "0.001"]),
        ("mixtral-8x7b", ["--moe-aux-loss-coeff", "0.02"]),
        ("gpt-oss-120b", ["--moe-router-load-balancing-type", "none"]),
        ("tiny-moe", []),
    ],
)  # fmt: skip
def test_preset_router_flags(name: str, expected: list[str]) -> None:
    model = get_preset(name)
    assert router_arguments(model.router) == expected
    bundle = PlanBundle(
        model=model,
        cluster=ClusterSpec(hardware="h100-sxm-80gb", num_gpus=8),
        job=TrainingJob(seq_length=4096, global_batch_size=64),
        plan=ParallelPlan.for_world(8, ep=8),
    )
    argv = megatron_arguments(bundle)
    start = argv.index("--moe-router-topk")
    router_flags = [a for a in argv if a.startswith(("--moe-router-", "--moe-aux-loss-"))]
    assert router_flags == ["--moe-router-topk", *[a for a in expected if a.startswith("--")]]
    if expected:
        first = argv.index(expected[0])
        assert first > start and argv[first : first + len(expected)] == expected


def test_flags_are_the_fields_that_differ_from_megatron_defaults() -> None:
    assert router_arguments(RouterSpec()) == []
    assert router_arguments(RouterSpec(moe_router_bias_update_rate=1e-4)) == [
        "--moe-router-bias-update-rate", "0.0001",
    ]  # fmt: skip
    assert router_arguments(RouterSpec(moe_router_dtype="fp64", moe_router_pre_softmax=True)) == [
        "--moe-router-pre-softmax", "--moe-router-dtype", "fp64",
    ]  # fmt: skip


def test_dense_models_carry_no_router_flags() -> None:
    bundle = PlanBundle(
        model=get_preset("tiny").replace(router=RouterSpec(moe_aux_loss_coeff=0.01)),
        cluster=ClusterSpec(hardware="h100-sxm-80gb", num_gpus=2),
        job=TrainingJob(seq_length=512, global_batch_size=8),
        plan=ParallelPlan.for_world(2),
    )
    assert not [a for a in megatron_arguments(bundle) if a.startswith("--moe-")]
