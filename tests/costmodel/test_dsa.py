"""DeepSeek sparse attention in the cost model: Megatron's model FLOPs (MLA's), the layer's
work counted by hand (`costmodel.dsa_work`), the Megatron runtime's pricing of the sparse
core, the indexer and its loss (`costmodel.runtimes.megatron.dsa_costs`), the saved tensors
(`costmodel.dsa_activations`) and the screen against the simulator."""

from __future__ import annotations

import pytest

from costmodel.activation_shard import activation_shard
from costmodel.dsa_activations import dsa_tensors
from costmodel.dsa_shapes import indexer_layer_share
from costmodel.dsa_work import (
    indexer_backward_flops_per_token,
    indexer_projection_forward_flops_per_token,
    selected_keys_per_token,
    sparse_core_forward_flops_per_token,
)
from costmodel.flops import attention_projection_forward_flops_per_token
from costmodel.iteration_flops import model_flops_per_iteration
from costmodel.runtimes.megatron.dsa_costs import dsa_core_s, indexer_pair
from costmodel.runtimes.megatron.layer_costs import layer_cost
from costmodel.runtimes.megatron.layer_shape import layer_shape
from profiles.store import load_profile
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.layer_kinds import DENSE_LAYER
from specs.plan import ParallelPlan
from specs.presets import get_preset
from tests.costmodel.test_screen import assert_screen_agrees

H100 = load_profile("h100-sxm-80gb")
GLM51 = get_preset("glm-5.1")
DENSE_ATTENTION = GLM51.replace(
    dsa_indexer_n_heads=None,
    dsa_indexer_head_dim=None,
    dsa_indexer_topk=None,
    dsa_indexer_loss_coeff=0.0,
    dsa_indexer_use_sparse_loss=False,
)
"""GLM-5.1 with dense MLA."""


def test_megatron_counts_a_dsa_layer_as_mla() -> None:
    # training.py num_floating_point_operations has no DSA term; GLM-5 projections:
    # q 2048·(6144 + 64·256 + 1) + kv 512·(6144 + 64·448 + 1) + 6144·64 + o 64·256·6144
    assert attention_projection_forward_flops_per_token(GLM51) == 2 * 165_022_208
    for seq in (2048, 131072):
        assert model_flops_per_iteration(GLM51, seq, 8) == model_flops_per_iteration(
            DENSE_ATTENTION, seq, 8
        )


def test_indexer_projections_worked_by_hand() -> None:
    # wq_b 2048 x 32·128, wk 6144 x 128, weights_proj 6144 x 32
    assert indexer_projection_forward_flops_per_token(GLM51) == 2 * (
        2048 * 4096 + 6144 * 128 + 6144 * 32
    )


def test_sparse_core_counts_the_selected_keys() -> None:
    # s = 131072, k = 2048: query i attends to min(i + 1, 2048) keys
    s, k = 131072, 2048
    keys = (k * (k + 1) / 2 + (s - k) * k) / s
    assert selected_keys_per_token(GLM51, s) == pytest.approx(keys)
    # MQA on the 512 + 64 latent, P·V on 512: 2·64·(2·512 + 64) per key
    assert sparse_core_forward_flops_per_token(GLM51, s) == pytest.approx(2 * 64 * 1088 * keys)


def test_top_k_covering_every_key_is_dense_causal_work() -> None:
    # s <= k: every earlier key is selected, s/2 per query as the dense causal count
    assert selected_keys_per_token(GLM51, 2048) == 1024
    assert selected_keys_per_token(GLM51, 1024) == 512


def test_indexer_backward_only_with_its_loss() -> None:
    no_loss = GLM51.replace(dsa_indexer_loss_coeff=0.0, dsa_indexer_use_sparse_loss=False)
    assert indexer_backward_flops_per_token(no_loss, 131072) == 0.0
    x = layer_shape(TrainingJob(seq_length=131072, global_batch_size=8), ParallelPlan(cp=32))
    assert indexer_pair(no_loss, H100, x)[1] == 0.0
    assert indexer_pair(GLM51, H100, x)[1] > 0.0


def test_index_sharing_share() -> None:
    # GLM-5.2: 21 of 78 decoder layers and the MTP layer (number 79) hold an indexer
    assert indexer_layer_share(get_preset("glm-5.2")) == 22 / 79
    assert indexer_layer_share(GLM51) == 1.0


def test_sparse_core_grows_with_the_top_k_not_the_square() -> None:
    # past k, a query's work stops growing: 4x the sequence is about 4x the core time
    short = dsa_core_s(
        GLM51, H100, layer_shape(TrainingJob(seq_length=32768, global_batch_size=8), ParallelPlan())
    )
    long = dsa_core_s(
        GLM51,
        H100,
        layer_shape(TrainingJob(seq_length=131072, global_batch_size=8), ParallelPlan()),
    )
    assert long["forward"] / short["forward"] == pytest.approx(4.0, rel=0.1)


def test_cp_gathers_the_latent_and_the_indexer_key() -> None:
    job = TrainingJob(seq_length=8192, global_batch_size=8)
    plan = ParallelPlan(cp=4, dp=1, cp_comm_type="all_gather")
    cost = layer_cost(GLM51, job, plan, H100, kind=DENSE_LAYER)
    # forward all-gather of T·cp rows of (512 + 64 + 128) bf16 channels, T = 8192 / 4
    assert cost.forward.cp_bytes == 4 * 2048 * (512 + 64 + 128) * 2


def test_saved_tensors_worked_by_hand() -> None:
    job = TrainingJob(seq_length=4096, global_batch_size=8)
    plan = ParallelPlan(tp=2, sequence_parallel=True, cp=2, cp_comm_type="all_gather")
    x = activation_shard(job, plan, False, False, None)
    tensors = dsa_tensors(GLM51, x)
    n = 2048  # tokens on a cp rank; 32 heads per tp rank
    assert tensors["qkv_heads"] == 2 * n * 32 * 192 + 2 * (n * 32 * 576 + n * 2 * 576)
    assert tensors["attn_output"] == 2 * n * 32 * 512 + 2 * n * 32 * 256
    assert tensors["dsa_topk"] == 4 * n * 2048
    assert tensors["dsa_indexer"] == n * (2 * (32 * 128 + 128) + 4 * 32)


def test_screen_agrees_with_the_simulator_on_a_dsa_model() -> None:
    model = GLM51.replace(
        name="glm5-small",
        num_layers=8,
        hidden_size=2048,
        num_attention_heads=16,
        ffn_hidden_size=5632,
        num_experts=16,
        moe_ffn_hidden_size=1024,
        moe_shared_expert_size=1024,
        moe_first_dense_layers=1,
        vocab_size=32000,
        q_lora_rank=512,
        dsa_indexer_topk=1024,
        dsa_indexer_topk_freq=2,
        dsa_indexer_skip_topk_offset=1,
    )
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=16)
    job = TrainingJob(seq_length=4096, global_batch_size=64)
    grid = {
        "tp": [1, 2, 4],
        "pp": [1, 2],
        "cp": [1, 2],
        "cp_comm_type": ["all_gather"],
        "ep": [1, 2],
        "micro_batch_size": [1, 2],
        "sequence_parallel": [True],
        "recompute": ["none", "selective", "full"],
        "distributed_optimizer": [True],
        "overlap_grad_reduce": [True],
    }
    assert_screen_agrees(model, cluster, job, grid, every=3, at_least=15)


def test_the_loss_adds_the_indexer_backward_to_the_layer() -> None:
    job = TrainingJob(seq_length=8192, global_batch_size=8)
    plan, x = ParallelPlan(), layer_shape(job, ParallelPlan())
    no_loss = GLM51.replace(dsa_indexer_loss_coeff=0.0, dsa_indexer_use_sparse_loss=False)
    with_loss = layer_cost(GLM51, job, plan, H100, kind=DENSE_LAYER).backward.compute_s
    without = layer_cost(no_loss, job, plan, H100, kind=DENSE_LAYER).backward.compute_s
    assert with_loss - without == pytest.approx(indexer_pair(GLM51, H100, x)[1])
