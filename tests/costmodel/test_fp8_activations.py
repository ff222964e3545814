"""The attention output projection's saved input under FP8 recipes
(costmodel.layer_activations.projection_saves_original_input).

Megatron-core sets ``save_original_input`` on ``linear_proj`` for fp8 runs whose recipe is
not ``delayed`` (``megatron/core/transformer/attention.py`` and
``multi_latent_attention.py``, core_v0.14.0 on, with Transformer Engine 2.6 on): the
projection then saves the bf16 attention output the fused attention kernel already keeps,
so the 1-byte FP8 copy of that output (s·b·a·d/t bytes per layer and microbatch) is not
kept. Delayed scaling keeps it (TE refuses ``save_original_input`` with DelayedScaling).
"""

from __future__ import annotations

import pytest

from costmodel.activation_shard import projection_saves_original_input
from costmodel.layer_activations import layer_activations
from costmodel.memory import memory_per_stage
from costmodel.memory_allowances import Fp8WeightStorage
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset

MODEL = get_preset("llama3-8b")
FP8 = TrainingJob(seq_length=4096, global_batch_size=64, precision="fp8")
BF16 = TrainingJob(seq_length=4096, global_batch_size=64, precision="bf16")
PLAN = ParallelPlan.for_world(8, tp=2, pp=1, distributed_optimizer=True)


@pytest.mark.parametrize(
    ("recipe", "saves_original"), [("delayed", False), ("tensorwise", True), ("mxfp8", True)]
)
def test_only_delayed_scaling_keeps_the_fp8_copy(recipe, saves_original):
    assert projection_saves_original_input(recipe) is saves_original


@pytest.mark.parametrize("saves_original", [False, True])
def test_attention_output_bytes_per_layer(saves_original):
    layer = layer_activations(MODEL, FP8, PLAN, 0, proj_saves_input=saves_original)
    tokens = PLAN.micro_batch_size * FP8.seq_length
    heads_width = MODEL.num_attention_heads * MODEL.head_dim / PLAN.tp
    # bf16 output kept by the attention kernel (2 bytes), plus the FP8 copy (1 byte) unless
    # the projection saves the original input
    per_element = 2 if saves_original else 3
    assert dict(layer.tensors)["attn_output"] == pytest.approx(per_element * tokens * heads_width)


def test_bf16_runs_do_not_depend_on_the_flag():
    kept = layer_activations(MODEL, BF16, PLAN, 0, proj_saves_input=False)
    original = layer_activations(MODEL, BF16, PLAN, 0, proj_saves_input=True)
    assert kept.full_bytes == original.full_bytes


def test_stage_memory_drops_one_copy_per_stored_layer_for_current_scaling():
    delayed, tensorwise = (
        memory_per_stage(MODEL, FP8, PLAN, fp8_weights=Fp8WeightStorage(recipe=recipe))
        for recipe in ("delayed", "tensorwise")
    )
    (delayed,), (tensorwise,) = delayed, tensorwise
    tokens = PLAN.micro_batch_size * FP8.seq_length
    copy = tokens * MODEL.num_attention_heads * MODEL.head_dim / PLAN.tp  # 1 byte each
    assert delayed.activations_bytes - tensorwise.activations_bytes == pytest.approx(
        MODEL.num_layers * delayed.in_flight_microbatches * copy
    )
    # the weights (bf16 parameter + TE's cached FP8 data and transpose) do not move
    assert delayed.weights_bytes == tensorwise.weights_bytes
