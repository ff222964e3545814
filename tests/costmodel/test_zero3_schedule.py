"""costmodel.runtimes.megatron.zero3_schedule: DeepSpeed's ZeRO stage-3 engine of 2021
(`ExecutionOptions.param_gather_engine` ``deepspeed_zero3``) against Megatron-FSDP."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from costmodel.collectives import collective_time_s
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEEPSPEED_ZERO3_2021
from costmodel.iteration import simulate_iteration
from costmodel.memory import memory_per_stage
from costmodel.runtimes.megatron.megatron_fsdp import (
    ChunkGather,
    fsdp_param_gather_exposed_s,
    largest_layer_params,
)
from costmodel.runtimes.megatron.runtime import MegatronRuntime
from costmodel.runtimes.megatron.zero3_schedule import (
    ZERO3_MAX_REUSE_DISTANCE_PARAMS,
    backward_gather_sweeps,
    backward_regather_share,
    gathered_layers,
    zero3_layer_modules,
)
from costmodel.topology import plan_placements
from profiles import load_profile
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.params import count_params
from specs.plan import ParallelPlan
from specs.presets import get_preset

A100 = load_profile("a100-sxm-80gb")
H = 12288
GPT3 = ModelSpec(
    name="gpt3-175b", num_layers=96, hidden_size=H, num_attention_heads=96,
    ffn_hidden_size=4 * H, vocab_size=51200, activation="gelu", normalization="layernorm",
    position_embedding="learned", tied_embeddings=True, add_bias_linear=True,
)  # fmt: skip
"""GPT-3 175B as SC21 Table 2 ran it (96 layers, hidden 12288, 96 heads)."""


def _sharded(dp: int, recompute: str = "full", **fields: object) -> ParallelPlan:
    return ParallelPlan(
        dp=dp, recompute=recompute, use_megatron_fsdp=True,
        data_parallel_sharding_strategy="optim_grads_params", **fields,
    )  # fmt: skip


def test_module_split_of_a_gpt3_layer() -> None:
    # QKV 3h² + 3h, output projection h² + h, FC1 4h² (+ bias), FC2 4h² (+ bias)
    qkv, proj, fc1, fc2 = zero3_layer_modules(GPT3, _sharded(384))
    assert qkv == pytest.approx(3 * H * H + 3 * H)
    assert proj == pytest.approx(H * H + H)
    assert fc1 == pytest.approx(4 * H * H, rel=1e-4)
    assert fc2 == pytest.approx(4 * H * H, rel=1e-4)


def test_reuse_distance_releases_all_but_fc2_of_a_175b_layer() -> None:
    """``_keep_for_later`` (deepspeed/runtime/zero/stage3.py, v0.3.16): a module is kept
    when its reuse distance is under ``stage3_max_reuse_distance`` (1e9, constants.py).
    After full recompute's forward, QKV's next use is 2·(h² + 8h²) = 2.7e9 parameters away,
    proj's 2·8h² = 2.4e9, FC1's 2·4h² = 1.2e9: released and gathered again by the
    pre-backward hook; FC2's is 0: kept. Re-gathered: 8h² of 12h²."""
    assert ZERO3_MAX_REUSE_DISTANCE_PARAMS == 1_000_000_000
    plan = _sharded(384)
    assert backward_regather_share(GPT3, plan) == pytest.approx(8 / 12, rel=1e-4)
    assert backward_gather_sweeps(GPT3, plan) == pytest.approx(1 + 8 / 12, rel=1e-4)


def test_small_layers_are_kept_from_the_recompute_to_the_backward() -> None:
    """llama3-8b's layer (2.2e8 parameters) is far under the reuse distance: the recompute
    forward's gathers serve the backward, one sweep per backward as Megatron-FSDP."""
    model = get_preset("llama3-8b")
    assert backward_regather_share(model, _sharded(8)) == 0.0
    assert backward_gather_sweeps(model, _sharded(8)) == 1.0
    assert backward_gather_sweeps(GPT3, _sharded(384, recompute="none")) == 1.0


def test_working_set_is_fc1_and_fc2() -> None:
    # the largest adjacent pair of (3h², h², 4h², 4h²) is FC1 + FC2: 8h² of 12h²
    assert gathered_layers(GPT3, _sharded(384)) == pytest.approx(8 / 12, rel=1e-4)


def test_memory_is_the_zero3_formula_plus_two_modules() -> None:
    """ZeRO-3 (Rajbhandari et al. 2020, §5.1): (2 + 2 + 12)·Ψ / N_d with fp16 gradients,
    plus the gathered FC1 and FC2 weights and gradients (2 + 2 bytes each); no module held
    whole beside them."""
    plan = _sharded(384)
    stage = memory_per_stage(GPT3, TrainingJob(seq_length=2048, global_batch_size=1536), plan,
                             main_grad_bytes=2, zero3_engine=True)[0]  # fmt: skip
    psi = count_params(GPT3).total
    working = 8 / 12 * largest_layer_params(GPT3, plan)
    state = stage.weights_bytes + stage.gradients_bytes + stage.optimizer_bytes
    assert state == pytest.approx((2 + 2 + 12) * psi / 384 + (2 + 2) * working, rel=1e-3)


def test_gathers_per_iteration_hand_worked() -> None:
    """Two GPT-3 layers on dp 8, micro-batch 1, one microbatch, full recompute: the forward
    gathers the rank's parameters once, the backward 1 + 8/12 times (recompute forward,
    then QKV, proj and FC1 again: ``pre_sub_module_forward_function`` and
    ``pre_sub_module_backward_function`` -> ``fetch_sub_module``), each an fp16 all-gather
    of 2 bytes per parameter (``_allgather_param``: ``torch.zeros(..., dtype=param.dtype)``,
    ``torch.distributed.all_gather``)."""
    model = dataclasses.replace(GPT3, num_layers=2)
    plan = _sharded(8)
    job = TrainingJob(seq_length=2048, global_batch_size=8)
    runtime = MegatronRuntime(options=DEEPSPEED_ZERO3_2021)
    sim = simulate_iteration(model, job, plan, A100, runtime=runtime)
    (chunk,) = sim.chunks[0]
    priced = runtime.priced_profile(A100)
    group = plan_placements(priced, plan)["dp-cp"]
    gather_s = collective_time_s(priced, "all_gather", chunk.dense_params * 2, group)
    passes = [t for t in sim.timing.actions[0] if t.action.phase in ("F", "B")]
    reduce_s = sum(event[2] for event in sim.tails[0].dp_events)
    expected = fsdp_param_gather_exposed_s(
        chunks=[ChunkGather(gather_s=gather_s, num_layers=2, num_passes=1 + 1 + 8 / 12)],
        compute_s=sum(t.end_s - t.start_s for t in passes) - reduce_s,
    )
    assert sim.tails[0].param_gather_s == pytest.approx(expected, rel=1e-4)
    megatron = simulate_iteration(model, job, plan, A100, runtime=MegatronRuntime())
    assert sim.tails[0].param_gather_s > megatron.tails[0].param_gather_s


def test_engine_rules() -> None:
    with pytest.raises(SpecError, match="param_gather_engine must be one of"):
        ExecutionOptions(param_gather_engine="zero")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="megatron runtime only"):
        ExecutionOptions(param_gather_engine="deepspeed_zero3", runtime="torch")
    with pytest.raises(SpecError, match="dense decoders of standard attention"):
        zero3_layer_modules(get_preset("mixtral-8x7b"), _sharded(8))


def test_step_copies_the_shards_gradients_only() -> None:
    """The step's fp32 gradient copy (``_prepare_fp32_grad_for_sub_group``) covers the
    rank's 1/DP shard: at most 4·Ψ/DP bytes above the backward's peak."""
    job = TrainingJob(seq_length=2048, global_batch_size=1536)
    stage = memory_per_stage(
        GPT3, job, _sharded(384), main_grad_bytes=2, step_gradient_copy=True, zero3_engine=True
    )[0]
    assert stage.optimizer_step_bytes <= 4 * count_params(GPT3).total / 384


def test_the_screen_refuses_the_engine() -> None:
    runtime = MegatronRuntime(options=DEEPSPEED_ZERO3_2021)
    cluster = ClusterSpec(hardware="a100-sxm-80gb", num_gpus=8)
    job = TrainingJob(seq_length=2048, global_batch_size=8)
    with pytest.raises(SpecError, match="closed-form screen prices Megatron-FSDP"):
        runtime.screen(GPT3, cluster, job, A100, pd.DataFrame())
