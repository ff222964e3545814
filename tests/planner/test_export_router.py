"""The MoE router in the Megatron-LM export (planner.export_model.router_arguments): the exact
flags of each preset's router, as Megatron-LM spells them (megatron/training/arguments.py,
Megatron-LM d98e8a64), inside the full argument list."""

from __future__ import annotations

import pytest

from planner.export import megatron_arguments
from planner.export_model import router_arguments
from planner.export_torchtitan import torchtitan_toml
from planner.export_torchtitan_model import torchtitan_model, torchtitan_router_note
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.errors import SpecError
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


def test_torchtitan_header_names_the_router_a_new_flavor_needs() -> None:
    bundle = PlanBundle(
        model=get_preset("kimi-k2"),
        cluster=ClusterSpec(hardware="h100-sxm-80gb", num_gpus=8),
        job=TrainingJob(seq_length=4096, global_batch_size=64),
        plan=ParallelPlan.for_world(8, ep=8, distributed_optimizer=True),
    )
    header = torchtitan_toml(bundle).split("\n[")[0]
    assert "score_func='sigmoid', route_norm=True, route_scale=2.827" in header
    assert "num_expert_groups=1, num_limited_groups=1, load_balance_coeff=0.001" in header
    # deepseek-v3 is torchtitan's 671B flavor, whose router is the preset's: no note
    assert torchtitan_model(get_preset("deepseek-v3"))[2]
    pre = get_preset("qwen3-30b-a3b").replace(router=RouterSpec(moe_router_pre_softmax=True))
    assert "route_norm=False" in str(torchtitan_router_note(pre))
    assert torchtitan_router_note(get_preset("tiny")) is None


def test_torchtitan_refuses_a_router_it_has_no_form_of() -> None:
    model = get_preset("tiny-moe").replace(
        router=RouterSpec(moe_router_score_function="sqrtsoftplus")
    )
    with pytest.raises(SpecError, match=r"sqrtsoftplus.*export --to megatron"):
        torchtitan_router_note(model)
