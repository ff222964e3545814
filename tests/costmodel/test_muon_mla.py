"""Muon's matrices of a multi-latent-attention model cover the rank's parameters exactly:
MLA's down projections ``q_a`` and ``kv_a`` are whole on every tp rank in both counts
(``MLASelfAttention.__init__`` builds ``linear_q_down_proj`` and ``linear_kv_down_proj``
``TELinear(parallel_mode="duplicated")``, megatron/core/transformer/
multi_latent_attention.py, NVIDIA/Megatron-LM d98e8a64)."""

from __future__ import annotations

import pytest

from costmodel.muon_sharding import rank_matrices, vocab_tensors
from costmodel.optimizer_muon import layer_matrices
from costmodel.rank_params import stage_layer_indices, stage_params
from specs.params import count_params, padded_vocab_size
from specs.plan import ParallelPlan
from specs.presets import get_preset

DSV3 = get_preset("deepseek-v3")  # 61 layers (3 dense), one MTP depth, no biases


def _norms(model, plan: ParallelPlan, stage: int) -> int:
    """The 1-D parameters (RMSNorm weights) one rank of ``stage`` holds: each layer's two
    pre-norms and the q and kv latent norms, the final norm on the last stage and the MTP
    depth's layer norms, enorm, hnorm and final_layernorm where the depth runs."""
    counts = count_params(model)
    total = sum(counts.layers[i].norms for i in stage_layer_indices(model, plan, stage))
    if stage == plan.pp - 1:
        total += counts.final_norm
        for depth in counts.mtp_weights(model.mtp_num_layers):
            total += depth.norms + sum(layer.norms for layer in depth.layers)
    return total


@pytest.mark.parametrize("tp", [1, 2, 4])
@pytest.mark.parametrize(("num_layers", "pp"), [(61, 1), (8, 2)])
def test_muon_matrices_and_adam_tensors_sum_to_the_stage(tp: int, num_layers: int, pp: int):
    model = DSV3.replace(num_layers=num_layers)
    plan = ParallelPlan(tp=tp, pp=pp, ep=8, dp=64 // (tp * pp))
    vocab = padded_vocab_size(model.vocab_size, tp) * model.hidden_size / tp
    for stage in range(pp):
        held = stage_params(model, plan, stage)
        muon = sum(m.params for m in rank_matrices(model, plan, stage))
        adam = vocab_tensors(model, plan, stage) * vocab + _norms(model, plan, stage)
        assert muon + adam == pytest.approx(held.dense + held.expert, rel=1e-15), stage


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_the_down_projections_are_whole_on_every_rank(tp: int) -> None:
    # q_a 7168 -> 1536 and kv_a 7168 -> 512 + 64 (deepseek-ai/DeepSeek-V3 q_a_proj
    # [1536, 7168], kv_a_proj_with_mqa [576, 7168])
    plan = ParallelPlan(tp=tp, dp=8)
    down = [m for m in layer_matrices(DSV3, plan, False) if m.cols == 7168 and m.rows < 7168]
    assert sorted((m.rows, m.cols) for m in down) == [(576, 7168), (1536, 7168)]
    layer = count_params(DSV3).layers[0]
    assert layer.latent_down_projections == (1536 + 576) * 7168
