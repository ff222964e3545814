"""The executor's model in one process: attention and RoPE against explicit math, MoE
routing against a per-token loop, split-invariant initialization, recompute, and a loss
that falls on a learnable sequence."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from executor.context import ParallelContext
from executor.engine import Engine
from executor.model import (
    Attention,
    CausalAttentionCore,
    DecoderChunk,
    Rotary,
    apply_rope,
    build_model,
    init_parameters,
)
from executor.moe import AuxLossGradient, MoE
from specs import ClusterSpec, ModelSpec, ParallelPlan, PlanBundle, TrainingJob
from specs.errors import SpecError
from specs.params import count_params, padded_vocab_size


def _spec(**changes: object) -> ModelSpec:
    base = ModelSpec(
        name="unit",
        num_layers=2,
        hidden_size=32,
        num_attention_heads=4,
        num_query_groups=2,
        ffn_hidden_size=64,
        vocab_size=64,
        max_position_embeddings=64,
    )
    return base.replace(**changes)


def _engine(spec: ModelSpec, plan: ParallelPlan, *, batch: int = 4, seq: int = 16, **kw):
    bundle = PlanBundle(
        model=spec,
        cluster=ClusterSpec(hardware="cpu", num_gpus=1),
        job=TrainingJob(
            seq_length=seq, global_batch_size=batch, precision=kw.pop("precision", "fp32")
        ),
        plan=plan,
    )
    return Engine.build(bundle, ParallelContext.single(plan), seed=7, **kw)


def test_loss_falls_on_a_learnable_sequence() -> None:
    # Each row counts upward mod 8 from a random start: the next token is a function of
    # the current one, so the loss can approach 0 (it starts near ln(128) = 4.85).
    engine = _engine(_spec(num_layers=1), ParallelPlan(micro_batch_size=4), learning_rate=2e-2)
    generator = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(15):
        start = torch.randint(0, 8, (4, 1), generator=generator)
        tokens = (start + torch.arange(17)) % 8
        losses.append(engine.train_step(tokens).loss)
    assert losses[0] > 4.0
    assert losses[-1] < 0.25 * losses[0]


def test_attention_matches_explicit_softmax() -> None:
    spec = _spec()
    torch.manual_seed(0)
    attention = Attention(spec, Rotary(spec.head_dim), CausalAttentionCore(), False)
    x = torch.randn(2, 6, 32)
    d, heads, groups = spec.head_dim, 4, 2
    q = attention.wq(x).view(2, 6, heads, d)
    k = attention.wk(x).view(2, 6, groups, d)
    v = attention.wv(x).view(2, 6, groups, d)
    cos, sin = attention.rotary.tables(6, x.device, x.dtype)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    k = k.repeat_interleave(heads // groups, dim=2)  # query head h uses group h // 2
    v = v.repeat_interleave(heads // groups, dim=2)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d)
    scores = scores.masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), float("-inf"))
    out = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v).reshape(2, 6, heads * d)
    torch.testing.assert_close(attention(x), attention.wo(out), rtol=1e-5, atol=1e-6)


def test_rope_scores_depend_only_on_relative_position() -> None:
    torch.manual_seed(0)
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)
    cos, sin = Rotary(16).tables(40, torch.device("cpu"), torch.float32)

    def score(p: int, r: int) -> torch.Tensor:
        return (
            apply_rope(q, cos[p : p + 1], sin[p : p + 1])
            * apply_rope(k, cos[r : r + 1], sin[r : r + 1])
        ).sum()

    torch.testing.assert_close(score(5, 2), score(30, 27))
    assert not torch.allclose(score(5, 2), score(5, 4))


def test_split_chunks_and_expert_shards_start_from_the_full_model_weights() -> None:
    spec = _spec(num_experts=4, moe_top_k=2, num_layers=4)
    full = dict(build_model(spec, seed=3).named_parameters())
    for ep_rank in range(2):
        chunk = DecoderChunk(
            spec, layer_ids=[2, 3], first=False, last=True, vocab=128, ep=(2, ep_rank)
        )
        init_parameters(chunk, seed=3, num_layers=4)
        for name, param in chunk.named_parameters():
            expected = full[name]
            if ".experts." in name:
                expected = expected[2 * ep_rank : 2 * ep_rank + 2]
            torch.testing.assert_close(param, expected, rtol=0, atol=0, msg=name)


def test_tied_embeddings_share_one_matrix() -> None:
    tied = build_model(_spec(tied_embeddings=True), seed=0)
    untied = build_model(_spec(), seed=0)
    assert tied.output.weight is tied.embedding.token.weight
    extra = sum(p.numel() for p in untied.parameters()) - sum(p.numel() for p in tied.parameters())
    assert extra == 128 * 32  # one padded (V, D) matrix


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"tied_embeddings": True, "position_embedding": "learned", "add_bias_linear": True},
        {"num_experts": 4, "moe_shared_expert_size": 32, "normalization": "layernorm"},
    ],
)
def test_parameter_count_agrees_with_specs(changes: dict) -> None:
    # specs.params counts the published vocabulary; the executor trains the padded one.
    spec = _spec(vocab_size=100, **changes)
    engine = _engine(spec, ParallelPlan(micro_batch_size=4))
    padded = spec.replace(vocab_size=padded_vocab_size(100, 1))
    assert engine.num_parameters == count_params(padded).total
    assert engine.num_parameters == sum(p.numel() for p in engine.chunks[0].parameters())


def test_multi_latent_attention_is_rejected() -> None:
    mla = _spec(kv_lora_rank=16, qk_head_dim=8, qk_pos_emb_head_dim=4, v_head_dim=8)
    with pytest.raises(SpecError, match="multi-latent attention"):
        build_model(mla, seed=0)


def test_hybrid_model_is_rejected() -> None:
    # specs.hybrid_checks.executor_hybrid_refusal: one check, shared with the torch runtime
    hybrid = _spec(hybrid_layer_pattern="M*", mamba_head_dim=16, mamba_num_groups=2)
    with pytest.raises(SpecError, match=r"\[hybrid_not_in_executor\].*transformer layers only"):
        build_model(hybrid, seed=0)


def test_latent_moe_model_is_rejected() -> None:
    # specs.latent_checks.executor_latent_moe_refusal: one check, shared with the torch runtime
    latent = _spec(num_experts=4, moe_top_k=2, moe_ffn_hidden_size=16, moe_latent_size=8)
    with pytest.raises(SpecError, match=r"\[latent_moe_not_in_executor\].*no latent"):
        build_model(latent, seed=0)


def _moe(**changes: object) -> MoE:
    spec = _spec(num_experts=4, moe_top_k=2, moe_ffn_hidden_size=16, **changes)
    layer = build_model(spec, seed=5).layers["0"].feed_forward
    assert isinstance(layer, MoE)
    layer.aux_loss_coeff = 0.0
    return layer


def test_moe_output_is_the_weighted_sum_of_the_chosen_experts() -> None:
    moe = _moe(moe_shared_expert_size=16)
    x = torch.randn(2, 5, 32, generator=torch.Generator().manual_seed(1))
    logits = x.reshape(-1, 32) @ moe.router.weight.t()
    top, chosen = logits.topk(2, dim=-1)
    weights = top.softmax(-1)
    w1, w3, w2 = moe.experts.w1, moe.experts.w3, moe.experts.w2
    rows = []
    for t, token in enumerate(x.reshape(-1, 32)):
        y = torch.zeros(32)
        for slot in range(2):
            e = int(chosen[t, slot])
            y += weights[t, slot] * ((F.silu(token @ w1[e].t()) * (token @ w3[e].t())) @ w2[e].t())
        rows.append(y)
    expected = torch.stack(rows).view(2, 5, 32) + moe.shared_expert(x)
    torch.testing.assert_close(moe(x), expected, rtol=1e-5, atol=1e-6)


def test_capacity_keeps_each_experts_highest_weight_choices() -> None:
    moe = _moe(moe_capacity_factor=0.5)
    weights = torch.rand(16, 2, generator=torch.Generator().manual_seed(2))
    experts = torch.stack([torch.arange(16) % 4, (torch.arange(16) + 1) % 4], dim=1)
    keep = moe._capacity_mask(weights, experts)
    capacity = math.ceil(16 * 2 / 4 * 0.5)  # Megatron: ceil(T·k / E · factor) = 4
    for e in range(4):
        chosen = experts == e
        assert int((keep & chosen).sum()) == capacity
        kept_min = weights[keep & chosen].min()
        assert bool((weights[chosen & ~keep] <= kept_min).all())
    moe.capacity_factor = None
    assert bool(moe._capacity_mask(weights, experts).all())


def test_load_balancing_loss_matches_switch_formula_and_reaches_the_router() -> None:
    moe = _moe()
    probs = torch.rand(10, 4).softmax(-1)
    experts = probs.topk(2, dim=-1).indices
    f = torch.bincount(experts.reshape(-1), minlength=4) / (10 * 2)
    expected = 4 * (f * probs.mean(0)).sum()  # E · Σ f_e · P_e
    torch.testing.assert_close(moe._aux_loss_share(probs, experts), expected)
    out = torch.randn(3, requires_grad=True)
    aux = torch.tensor(0.7, requires_grad=True)
    AuxLossGradient.apply(out, aux, 0.25).sum().backward()
    assert float(aux.grad) == 0.25 and torch.equal(out.grad, torch.ones(3))
    moe.aux_loss_coeff = 1.0
    moe(torch.randn(2, 4, 32)).sum().backward()
    assert moe.router.weight.grad is not None and moe.router.weight.grad.abs().sum() > 0


def _first_step_grads(engine: Engine, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    engine.forward_backward(tokens)
    return {n: p.grad.clone() for n, p in engine.chunks[0].named_parameters()}


@pytest.mark.parametrize(
    "recompute",
    [
        {"recompute": "selective"},
        {"recompute": "full"},
        {"recompute": "full", "recompute_method": "block", "recompute_num_layers": 1},
    ],
)
def test_recompute_gives_the_same_gradients(recompute: dict) -> None:
    spec = _spec(num_experts=4, moe_layer_freq=2)
    tokens = torch.randint(0, 64, (4, 17), generator=torch.Generator().manual_seed(3))
    expected = _first_step_grads(_engine(spec, ParallelPlan(micro_batch_size=2)), tokens)
    actual = _first_step_grads(_engine(spec, ParallelPlan(micro_batch_size=2, **recompute)), tokens)
    for name, grad in expected.items():
        torch.testing.assert_close(actual[name], grad, rtol=1e-5, atol=1e-7, msg=name)


def test_bf16_plans_run_in_fp32_on_cpu() -> None:
    tokens = torch.randint(0, 64, (4, 17), generator=torch.Generator().manual_seed(4))
    fp32 = _engine(_spec(), ParallelPlan(micro_batch_size=4)).train_step(tokens).loss
    bf16 = _engine(_spec(), ParallelPlan(micro_batch_size=4), precision="bf16")
    assert bf16.train_step(tokens).loss == fp32
