"""Megatron-FSDP memory and communication (costmodel.megatron_fsdp and its call sites)."""

from __future__ import annotations

import pytest

from costmodel.megatron_fsdp import (
    GATHERED_LAYERS,
    fsdp_param_gather_exposed_s,
    fsdp_state_bytes,
    largest_layer_params,
)
from costmodel.memory import memory_per_stage
from specs.job import TrainingJob
from specs.params import count_params
from specs.plan import ParallelPlan
from specs.presets import get_preset

MODEL = get_preset("llama3-8b")
JOB = TrainingJob(seq_length=4096, global_batch_size=256)


def _fsdp(dp: int, strategy: str = "optim_grads_params") -> ParallelPlan:
    return ParallelPlan(dp=dp, use_megatron_fsdp=True, data_parallel_sharding_strategy=strategy)


def _state_bytes(plan: ParallelPlan) -> float:
    stage = memory_per_stage(MODEL, JOB, plan)[0]
    return stage.weights_bytes + stage.gradients_bytes + stage.optimizer_bytes


def test_state_memory_falls_with_dp_under_optim_grads_params() -> None:
    sizes = [_state_bytes(_fsdp(dp)) for dp in (2, 4, 8, 16, 64)]
    assert sizes == sorted(sizes, reverse=True)
    assert sizes[-1] < sizes[0] / 8


def test_zero3_formula_plus_the_gathered_layers() -> None:
    # ZeRO stage 3 (Rajbhandari et al. 2020, §5.1): (2 + 2 + K)·Ψ / N_d with K = 12 for
    # mixed-precision Adam; paraplan keeps fp32 main gradients (4 bytes), so (2 + 4 + 12),
    # plus two layers' gathered weights and gradients.
    psi = count_params(MODEL).total
    dp = 16
    working = GATHERED_LAYERS * largest_layer_params(MODEL, _fsdp(dp))
    expected = (2 + 4 + 12) * psi / dp + (2 + 4) * working
    assert _state_bytes(_fsdp(dp)) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(
    ("strategy", "sharded"),
    [
        ("no_shard", ()),
        ("optim", ("optimizer",)),
        ("optim_grads", ("optimizer", "gradients")),
        ("optim_grads_params", ("optimizer", "gradients", "weights")),
    ],
)
def test_each_strategy_shards_its_zero_stage(strategy: str, sharded: tuple[str, ...]) -> None:
    psi = float(count_params(MODEL).total)
    state = fsdp_state_bytes(
        MODEL, _fsdp(8, strategy), dense_params=psi, expert_params=0.0, bytes_per_param=(2, 4, 12)
    )
    full = {"weights": 2 * psi, "gradients": 4 * psi, "optimizer": 12 * psi}
    for part, whole in full.items():
        value = getattr(state, f"{part}_bytes")
        if part in sharded:
            assert value < whole / 4
        else:
            assert value == whole


def test_optim_equals_the_distributed_optimizer_memory() -> None:
    fsdp = memory_per_stage(MODEL, JOB, _fsdp(8, "optim"))[0]
    distopt = memory_per_stage(MODEL, JOB, ParallelPlan(dp=8, distributed_optimizer=True))[0]
    assert fsdp.optimizer_bytes == pytest.approx(distopt.optimizer_bytes)
    assert fsdp.weights_bytes == distopt.weights_bytes


def test_gather_exposure_hand_worked() -> None:
    # 4 passes over 8 layers, 0.8 s of gathers per pass, 10 s of compute: each pass exposes
    # its first layer (0.1 s) -> 0.4 s; the rest (2.8 s) hides behind compute.
    assert fsdp_param_gather_exposed_s(
        stage_gather_s=0.8, num_layers=8, num_passes=4, compute_s=10.0
    ) == pytest.approx(0.4)
    # 1 s of compute: 2.8 - 1.0 = 1.8 s more is exposed.
    assert fsdp_param_gather_exposed_s(
        stage_gather_s=0.8, num_layers=8, num_passes=4, compute_s=1.0
    ) == pytest.approx(2.2)
    assert (
        fsdp_param_gather_exposed_s(stage_gather_s=0.0, num_layers=8, num_passes=4, compute_s=1.0)
        == 0.0
    )
