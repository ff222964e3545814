"""Memory of a LoRA job (costmodel.model_state, rank_params, layer_activations,
activations): the frozen base keeps its weights and no gradient or optimizer state, the
adapters take both, and the frozen linear layers keep no inputs for a wgrad GEMM; golden
values derived here from the byte counts."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.layer_activations import layer_activations
from costmodel.memory import memory_per_stage
from costmodel.rank_params import stage_params
from costmodel.vocab_activations import output_microbatch_bytes
from specs.finetune import LoraSpec
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset

LLAMA = get_preset("llama3-8b")
FULL = TrainingJob(seq_length=4096, global_batch_size=32)
QKV = LoraSpec(rank=16, targets=("linear_qkv",))
T, H, Q, F = 4096, 4096, 4096, 14336  # tokens of one microbatch, hidden, query width, FFN


def lora(spec: LoraSpec = QKV, job: TrainingJob = FULL) -> TrainingJob:
    return dataclasses.replace(job, lora=spec)


def test_stage_params_hold_the_adapters_and_freeze_the_rest() -> None:
    plan = ParallelPlan.for_world(8, tp=2, pp=2, distributed_optimizer=True)
    full, tuned = stage_params(LLAMA, plan, 0), stage_params(LLAMA, plan, 0, QKV)
    adapters = 16 * 16 * (4096 + 6144) / 2  # 16 layers x r (in + out) / tp
    assert tuned.adapter == pytest.approx(adapters)
    assert tuned.frozen and not full.frozen
    assert (tuned.dense, tuned.expert, tuned.linear) == (full.dense, full.expert, full.linear)
    assert tuned.trained == pytest.approx(adapters)
    assert tuned.trained_linear == 0 and full.trained == full.total


def test_gradients_and_optimizer_state_cover_the_adapters_only() -> None:
    plan = ParallelPlan.for_world(8, tp=1, pp=2, distributed_optimizer=True)
    full = memory_per_stage(LLAMA, FULL, plan)
    tuned = memory_per_stage(LLAMA, lora(), plan)
    adapters = 16 * 16 * (4096 + 6144)  # 16 layers per stage, r (in + out), tp 1
    for f, t in zip(full, tuned, strict=True):
        assert t.gradients_bytes == pytest.approx(4 * adapters)  # fp32 main gradients
        assert t.optimizer_bytes == pytest.approx(12 * adapters / 4)  # over dp 4
        assert t.weights_bytes == pytest.approx(f.weights_bytes + 2 * adapters)
        assert t.total_bytes < f.total_bytes


def tensors(job: TrainingJob, plan: ParallelPlan, **kw) -> dict[str, float]:
    return dict(layer_activations(LLAMA, job, plan, 0, **kw).tensors)


def test_bf16_frozen_linears_keep_no_wgrad_inputs() -> None:
    plan = ParallelPlan()
    full, tuned = tensors(FULL, plan), tensors(lora(), plan)
    assert tuned["qkv_input"] == full["qkv_input"] == 2 * T * H  # shared with the adapter
    assert tuned["fc1_input"] == 0 and full["fc1_input"] == 2 * T * H
    assert tuned["act_output"] == 0 and full["act_output"] == 2 * T * F
    assert tuned["attn_output"] == full["attn_output"] == 2 * T * Q
    assert tuned["qkv_adapter"] == 2 * T * 16  # B's input, A's output
    fc2 = tensors(lora(LoraSpec(rank=16, targets=("linear_fc2",))), plan)
    assert fc2["act_output"] == 2 * T * F and fc2["qkv_input"] == 0


def test_fp8_targeted_norm_output_keeps_its_row_wise_copy_and_the_adapters_input() -> None:
    plan = ParallelPlan()
    fp8 = dataclasses.replace(FULL, precision="fp8")
    full, tuned = tensors(fp8, plan), tensors(lora(job=fp8), plan)
    assert full["qkv_input"] == 1 * T * H
    assert tuned["qkv_input"] == (1 + 2) * T * H
    # delayed scaling: the trained projection keeps an FP8 copy, the frozen one none
    assert full["attn_output"] == (2 + 1) * T * Q and tuned["attn_output"] == 2 * T * Q
    assert tuned["fc1_input"] == 0 and tuned["act_output"] == 0


def test_sequence_parallel_adapters_save_the_gathered_input() -> None:
    plan = ParallelPlan(tp=2, sequence_parallel=True)
    tuned = tensors(lora(), plan)
    assert tuned["qkv_input"] == 2 * T * H / 2 + 2 * T * H


def test_the_frozen_output_layer_keeps_no_input() -> None:
    plan = ParallelPlan()
    full_kept, _ = output_microbatch_bytes(LLAMA, FULL, plan)
    tuned_kept, _ = output_microbatch_bytes(LLAMA, lora(), plan)
    assert full_kept - tuned_kept == 2 * T * H
