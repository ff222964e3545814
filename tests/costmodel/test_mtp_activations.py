"""What a multi-token-prediction depth keeps outside its layers, tensor by tensor, and how a
stage and the screen count it (Megatron-core ``MultiTokenPredictionLayer.forward``,
``process_mtp_loss``, megatron/core/transformer/multi_token_prediction.py d98e8a64)."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.activation_shard import activation_shard
from costmodel.activations import stage_activations
from costmodel.layer_activations import shard_layer_activations
from costmodel.mtp_activations import MTP_CHECKPOINT_TENSORS, mtp_depth_tensors
from specs.finetune import LoraSpec
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset

DSV3 = get_preset("deepseek-v3").replace(num_layers=8)  # h 7168, vocab 129280, one depth
BF16 = TrainingJob(seq_length=4096, global_batch_size=64)
SP = ParallelPlan(tp=2, dp=4, sequence_parallel=True)
H_ROWS = 2 * 4096 * 7168 // 2  # e·T·h/tp: [4096, 7168] bf16 over the 2 SP ranks


def test_the_tensors_of_a_depth_by_hand() -> None:
    tensors = mtp_depth_tensors(DSV3, BF16, SP, dropout=False)
    assert tensors == {
        "mtp_embedding": 8 * 4096,  # the rolled int64 ids F.embedding saves
        "enorm_input": H_ROWS,  # the embedding output
        "hnorm_input": H_ROWS,  # the hidden states the depth receives
        "eh_proj_input": 2 * 4096 * 2 * 7168 // 2,  # TE Linear's local [T/tp, 2h] input
        "eh_proj_gathered_output": 2 * 4096 * 7168 // 2,  # [T, h] kept by the slice: 1 - 1/2
        "mtp_final_norm_input": H_ROWS,
        "mtp_output_layer_input": H_ROWS,
        "mtp_logits": 4 * 4096 * 129280 // 2,  # the fp32 softmax of the unfused loss
    }


def test_the_gathered_output_is_the_layer_input_without_sequence_parallelism() -> None:
    tensors = mtp_depth_tensors(DSV3, BF16, SP.replace(sequence_parallel=False), dropout=False)
    assert tensors["eh_proj_gathered_output"] == 0.0
    assert tensors["enorm_input"] == 2 * 4096 * 7168  # T rows on every TP rank
    assert tensors["eh_proj_input"] == 2 * 4096 * 2 * 7168


def test_the_projection_input_by_precision() -> None:
    fp8 = mtp_depth_tensors(DSV3, dataclasses.replace(BF16, precision="fp8"), SP)
    assert fp8["eh_proj_input"] == 4096 * 2 * 7168 // 2  # the FP8 copy, 1 byte
    assert fp8["enorm_input"] == H_ROWS  # norms keep 16-bit inputs
    # an nvfp4 job's depth runs in no fp4 context: a bf16 input (not the 0.5625-byte copy)
    nvfp4 = mtp_depth_tensors(DSV3, dataclasses.replace(BF16, precision="nvfp4"), SP)
    assert nvfp4["eh_proj_input"] == 2 * 4096 * 2 * 7168 // 2


def test_a_lora_job_keeps_no_frozen_projection_or_output_layer_input() -> None:
    lora = dataclasses.replace(BF16, lora=LoraSpec(rank=16))
    tensors = mtp_depth_tensors(DSV3, lora, SP, dropout=False)
    assert tensors["eh_proj_input"] == 0.0 and tensors["mtp_output_layer_input"] == 0.0
    assert tensors["enorm_input"] == tensors["hnorm_input"] == H_ROWS


def test_the_embedding_keeps_a_dropout_mask_with_hidden_dropout() -> None:
    tensors = mtp_depth_tensors(DSV3, BF16, SP, dropout=True)
    assert tensors["mtp_embedding"] == 8 * 4096 + 4096 * 7168 // 2  # 1-byte mask, T/tp rows


@pytest.mark.parametrize("recompute", ["none", "selective"])
def test_a_stage_keeps_the_depth_layers_and_the_tensors_outside(recompute: str) -> None:
    plan = SP.replace(recompute=recompute)
    acts = stage_activations(DSV3, BF16, plan, 0, dropout=False)
    x = activation_shard(BF16, plan, dropout=False)
    (kind,) = DSV3.mtp_depth_kinds()
    layer = shard_layer_activations(DSV3, x, plan, kind, "flash")
    kept = layer.full_bytes if recompute == "none" else layer.selective_bytes
    outside = sum(mtp_depth_tensors(DSV3, BF16, plan, dropout=False).values())
    assert acts.in_flight_microbatches == 1
    assert acts.mtp_bytes == pytest.approx(kept + outside, rel=1e-12)


def test_full_recompute_keeps_the_checkpoint_inputs_and_rebuilds_the_rest() -> None:
    plan = SP.replace(recompute="full")
    acts = stage_activations(DSV3, BF16, plan, 0, dropout=False)
    tensors = mtp_depth_tensors(DSV3, BF16, plan, dropout=False)
    kept = 8 * 4096 + 3 * H_ROWS + 4 * 4096 * 129280 // 2  # ids, enorm/hnorm/output inputs, logits
    assert acts.mtp_bytes == sum(tensors[name] for name in MTP_CHECKPOINT_TENSORS) == kept
    x = activation_shard(BF16, plan, dropout=False)
    (kind,) = DSV3.mtp_depth_kinds()
    layer = shard_layer_activations(DSV3, x, plan, kind, "flash")
    rebuilt = layer.full_bytes + 2 * 4096 * 2 * 7168 // 2 + 2 * H_ROWS  # + eh_proj, gather, norm
    # the depth (an MoE layer and more) is the stage's largest checkpoint
    assert acts.recompute_working_bytes == pytest.approx(rebuilt, rel=1e-12)
