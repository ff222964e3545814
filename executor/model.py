"""Llama-style decoder built from a `specs.ModelSpec`, split into pipeline chunks.

One class, `DecoderChunk`, is both the plain model (every layer, embedding and output
head) and a pipeline chunk (a slice of layers, with the embedding on the first chunk and
the head on the last). Layers live in an ``nn.ModuleDict`` keyed by their global index, so a
parameter has the same name in a chunk as in the whole model (``layers.5.attention.wq.weight``)
and per-name seeded initialization gives every split the same weights.

Pieces: token embedding (plus a learned position table when the spec asks for one),
RMSNorm or LayerNorm, rotary position embedding (rotate-half form, base 10000: ModelSpec
carries no rope base), grouped-query attention through
``torch.nn.functional.scaled_dot_product_attention`` (causal), a SwiGLU or GELU MLP or an MoE
layer per ``model.moe_layer_mask()`` (`executor.moe`), and a tied or untied output layer.
Multi-latent attention and hybrid models (Mamba-2 layers, single-part layers) are rejected
with a SpecError (`check_model_supported`): building them as standard transformer layers
would train a different model than the spec and the cost model describe.

The vocabulary is padded to a multiple of 128·tp as Megatron-LM does
(``--make-vocab-size-divisible-by 128``, `specs.params.padded_vocab_size`); the padded rows
are ordinary trained classes that no target uses.

Shape legend: B batch, S sequence held by this rank, D hidden, H query heads and G key/value
heads held by this rank, K head dim, Q = H·K, F MLP inner size, V padded vocabulary.
"""

from __future__ import annotations

import contextlib
import math
import zlib
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from executor.moe import Experts, MoE
from specs.errors import SpecError
from specs.executor_refusals import executor_model_refusal
from specs.model import ModelSpec
from specs.params import padded_vocab_size

ROPE_BASE = 10000.0
"""Rotary base frequency (Llama 2's value)."""
INIT_STD = 0.02
"""Standard deviation of weight init (Megatron's ``--init-method-std`` default)."""


def check_model_supported(spec: ModelSpec) -> None:
    """Raise SpecError for model features this executor does not build
    (`specs.executor_refusals.executor_model_refusal`: hybrid, latent MoE, output gate,
    DeepSeek sparse attention), multi-latent attention."""
    refusal = executor_model_refusal(spec)
    if refusal is not None:
        raise SpecError(refusal)
    if spec.uses_mla:
        raise SpecError(
            f"ModelSpec {spec.name!r} uses multi-latent attention (kv_lora_rank="
            f"{spec.kv_lora_rank}); the executor builds standard grouped-query attention only. "
            "Execute an equivalent GQA spec (set kv_lora_rank and the MLA head dims to null)"
        )


class RMSNorm(nn.Module):
    """x / rms(x) · w, computed in fp32."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x_BSD: torch.Tensor) -> torch.Tensor:
        x = x_BSD.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return (x * self.weight.float()).type_as(x_BSD)


def make_norm(spec: ModelSpec) -> nn.Module:
    """The spec's normalization over the hidden dim."""
    if spec.normalization == "rmsnorm":
        return RMSNorm(spec.hidden_size)
    return nn.LayerNorm(spec.hidden_size, eps=1e-5)


class Rotary:
    """Rotary tables for given token positions, cached by (length, device, dtype).

    Not an nn.Module: it holds no parameters or buffers, so data-parallel wrappers never
    broadcast it (each context-parallel rank has its own positions).
    """

    def __init__(self, head_dim: int, positions: torch.Tensor | None = None) -> None:
        self.head_dim = head_dim
        self.positions = positions
        self._cache: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    def tables(self, seq: int, device: torch.device, dtype: torch.dtype):
        """cos, sin of shape (S, K) for the rank's first ``seq`` positions."""
        key = (seq, device, dtype)
        if key not in self._cache:
            if self.positions is not None:
                pos = self.positions[:seq].to(device=device, dtype=torch.float32)
            else:
                pos = torch.arange(seq, device=device, dtype=torch.float32)
            half = torch.arange(0, self.head_dim, 2, device=device, dtype=torch.float32)
            inv_freq = ROPE_BASE ** (-half / self.head_dim)  # (K/2,)
            angles = torch.outer(pos, inv_freq)  # (S, K/2)
            angles = torch.cat([angles, angles], dim=-1)  # (S, K)
            self._cache[key] = (angles.cos().to(dtype), angles.sin().to(dtype))
        return self._cache[key]


def apply_rope(x_BSHK: torch.Tensor, cos_SK: torch.Tensor, sin_SK: torch.Tensor):
    """Rotate-half rotary embedding (GPT-NeoX / Hugging Face Llama form)."""
    x1, x2 = x_BSHK.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    return x_BSHK * cos_SK[None, :, None, :] + rotated * sin_SK[None, :, None, :]


class CausalAttentionCore(nn.Module):
    """softmax(Q Kᵀ / sqrt(K) + causal mask) V over a whole local sequence."""

    def forward(self, q_BHSK: torch.Tensor, k_BGSK: torch.Tensor, v_BGSK: torch.Tensor):
        gqa = q_BHSK.shape[1] != k_BGSK.shape[1]
        return F.scaled_dot_product_attention(
            q_BHSK, k_BGSK, v_BGSK, is_causal=True, enable_gqa=gqa
        )


class Attention(nn.Module):
    """Grouped-query self-attention; under TP the projections hold H/tp and G/tp heads."""

    def __init__(
        self, spec: ModelSpec, rotary: Rotary | None, core: nn.Module, recompute_core: bool
    ) -> None:
        super().__init__()
        d, heads, groups = spec.head_dim, spec.num_attention_heads, spec.query_groups
        qkv_bias = spec.add_bias_linear or spec.add_qkv_bias
        self.head_dim = d
        self.wq = nn.Linear(spec.hidden_size, heads * d, bias=qkv_bias)
        self.wk = nn.Linear(spec.hidden_size, groups * d, bias=qkv_bias)
        self.wv = nn.Linear(spec.hidden_size, groups * d, bias=qkv_bias)
        self.wo = nn.Linear(heads * d, spec.hidden_size, bias=spec.add_bias_linear)
        self.wo.is_output_projection = True
        self.rotary = rotary
        self.core = core
        self.recompute_core = recompute_core

    def forward(self, x_BSD: torch.Tensor) -> torch.Tensor:
        batch, seq = x_BSD.shape[0], x_BSD.shape[1]
        # -1 heads: under TP each rank holds only its shard of the heads.
        q_BSHK = self.wq(x_BSD).view(batch, seq, -1, self.head_dim)
        k_BSGK = self.wk(x_BSD).view(batch, seq, -1, self.head_dim)
        v_BSGK = self.wv(x_BSD).view(batch, seq, -1, self.head_dim)
        if self.rotary is not None:
            cos, sin = self.rotary.tables(seq, x_BSD.device, q_BSHK.dtype)
            q_BSHK, k_BSGK = apply_rope(q_BSHK, cos, sin), apply_rope(k_BSGK, cos, sin)
        q, k, v = (t.transpose(1, 2) for t in (q_BSHK, k_BSGK, v_BSGK))  # (B, heads, S, K)
        if self.recompute_core and torch.is_grad_enabled():
            o_BHSK = checkpoint(self.core, q, k, v, use_reentrant=False)
        else:
            o_BHSK = self.core(q, k, v)
        o_BSQ = o_BHSK.transpose(1, 2).reshape(batch, seq, -1)  # (B, S, H·K)
        return self.wo(o_BSQ)


class MLP(nn.Module):
    """SwiGLU: w2(silu(w1 x) · w3 x); GELU: w2(gelu(w1 x))."""

    def __init__(self, spec: ModelSpec, hidden: int, ffn: int) -> None:
        super().__init__()
        bias = spec.add_bias_linear
        self.swiglu = spec.activation == "swiglu"
        self.w1 = nn.Linear(hidden, ffn, bias=bias)
        self.w3 = nn.Linear(hidden, ffn, bias=bias) if self.swiglu else None
        self.w2 = nn.Linear(ffn, hidden, bias=bias)
        self.w2.is_output_projection = True

    def forward(self, x_BSD: torch.Tensor) -> torch.Tensor:
        if self.w3 is not None:
            return self.w2(F.silu(self.w1(x_BSD)) * self.w3(x_BSD))
        return self.w2(F.gelu(self.w1(x_BSD)))


class TransformerBlock(nn.Module):
    """Pre-norm block: x + attn(norm(x)), then x + ffn(norm(x))."""

    def __init__(self, spec: ModelSpec, attention: Attention, feed_forward: nn.Module) -> None:
        super().__init__()
        self.attention_norm = make_norm(spec)
        self.attention = attention
        self.ffn_norm = make_norm(spec)
        self.feed_forward = feed_forward

    def forward(self, x_BSD: torch.Tensor) -> torch.Tensor:
        h = x_BSD + self.attention(self.attention_norm(x_BSD))
        return h + self.feed_forward(self.ffn_norm(h))


class Embedding(nn.Module):
    """Token embedding, plus a learned position table when the spec has one."""

    def __init__(self, spec: ModelSpec, vocab: int, positions: torch.Tensor | None) -> None:
        super().__init__()
        self.token = nn.Embedding(vocab, spec.hidden_size)
        learned = spec.position_embedding == "learned"
        self.position = (
            nn.Embedding(spec.max_position_embeddings, spec.hidden_size) if learned else None
        )
        self.positions = positions
        """Global positions of this rank's tokens (context parallelism); None: 0..S-1."""

    def forward(self, tokens_BS: torch.Tensor) -> torch.Tensor:
        h_BSD = self.token(tokens_BS)
        if self.position is not None:
            seq = tokens_BS.shape[1]
            if self.positions is not None:
                pos = self.positions[:seq].to(tokens_BS.device)
            else:
                pos = torch.arange(seq, device=tokens_BS.device)
            h_BSD = h_BSD + self.position(pos)[None]
        return h_BSD


class DecoderChunk(nn.Module):
    """A contiguous slice of decoder layers; with the embedding when it is the first chunk
    and the final norm and output layer when it is the last (the plain model is both)."""

    def __init__(
        self,
        spec: ModelSpec,
        *,
        layer_ids: Iterable[int],
        first: bool,
        last: bool,
        vocab: int,
        core_factory: Callable[[], nn.Module] = CausalAttentionCore,
        positions: torch.Tensor | None = None,
        selective_recompute: bool = False,
        ep: tuple[int, int] = (1, 0),
    ) -> None:
        super().__init__()
        self.spec = spec
        mask = spec.moe_layer_mask()
        rotary = Rotary(spec.head_dim, positions) if spec.position_embedding == "rope" else None
        self.embedding = Embedding(spec, vocab, positions) if first else None
        self.layers = nn.ModuleDict()
        for i in layer_ids:
            attention = Attention(spec, rotary, core_factory(), selective_recompute)
            if mask[i]:
                shared = spec.moe_shared_expert_size
                shared_mlp = MLP(spec, spec.hidden_size, shared) if shared else None
                ffn: nn.Module = MoE(spec, ep_size=ep[0], ep_rank=ep[1], shared_expert=shared_mlp)
            else:
                ffn = MLP(spec, spec.hidden_size, spec.ffn_hidden_size)
            self.layers[str(i)] = TransformerBlock(spec, attention, ffn)
        self.norm = make_norm(spec) if last else None
        self.output = nn.Linear(spec.hidden_size, vocab, bias=False) if last else None
        if last and first and spec.tied_embeddings:
            self.tie_output()
        self.full_recompute_groups: list[list[str]] = []
        """Lists of consecutive layer keys run under one activation checkpoint."""
        self.forward_context: Callable[[], AbstractContextManager] = contextlib.nullcontext
        """Factory of the context the forward runs in (autocast; `executor.precision`)."""

    def tie_output(self) -> None:
        """Make the output layer use the token embedding matrix (same chunk only)."""
        assert self.embedding is not None and self.output is not None
        self.output.weight = self.embedding.token.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """tokens (B, S) on the first chunk, hidden (B, S, D) otherwise; returns hidden
        (B, S, D), or fp32 logits (B, S, V) on the last chunk."""
        with self.forward_context():
            h = self.embedding(x) if self.embedding is not None else x
            checkpointed = {group[0]: group for group in self.full_recompute_groups}
            skip: set[str] = set()
            for key, layer in self.layers.items():
                if key in skip:
                    continue
                group = checkpointed.get(key)
                if group is not None and torch.is_grad_enabled():
                    h = checkpoint(self._run_layers, h, group, use_reentrant=False)
                    skip.update(group)
                else:
                    h = layer(h)
            if self.output is not None:
                assert self.norm is not None
                h = self.output(self.norm(h)).float()
        return h

    def _run_layers(self, h: torch.Tensor, keys: list[str]) -> torch.Tensor:
        for key in keys:
            h = self.layers[key](h)
        return h


def plan_full_recompute(
    layer_keys: list[str], method: str, num_layers: int | None
) -> list[list[str]]:
    """Groups of layers checkpointed together under full recompute (Megatron semantics).

    ``uniform``: the chunk's layers in consecutive groups of ``num_layers`` (default 1), each
    group's input stored and the group recomputed. ``block``: the first ``num_layers``
    layers (default all) each checkpointed, the rest keep their activations.
    """
    n = num_layers or (1 if method == "uniform" else len(layer_keys))
    if method == "uniform":
        return [layer_keys[i : i + n] for i in range(0, len(layer_keys), n)]
    return [[key] for key in layer_keys[:n]]


def _seeded_normal_(tensor: torch.Tensor, std: float, seed: int, name: str) -> None:
    generator = torch.Generator(device=tensor.device)
    generator.manual_seed(zlib.crc32(f"{seed}:{name}".encode()))
    tensor.normal_(0.0, std, generator=generator)


@torch.no_grad()
def init_parameters(chunk: nn.Module, *, seed: int, num_layers: int) -> None:
    """Initialize every parameter from (seed, its full-model name), so any split of the
    model into chunks, shards and experts starts from the same weights.

    Linear and embedding weights ~ N(0, 0.02); output projections of attention and MLP
    ~ N(0, 0.02 / sqrt(2·L)) (Megatron's scaled init); norm weights 1, biases 0. Expert
    weights are seeded per global expert. A chunk's untied copy of a tied embedding
    (``output.weight`` with ``tied_embeddings``) is seeded as ``embedding.token.weight``.
    """
    scaled_std = INIT_STD / math.sqrt(2.0 * num_layers)
    tied = getattr(getattr(chunk, "spec", None), "tied_embeddings", False)
    for module_name, module in chunk.named_modules():
        prefix = f"{module_name}." if module_name else ""
        if isinstance(module, nn.Linear | nn.Embedding):
            std = scaled_std if getattr(module, "is_output_projection", False) else INIT_STD
            name = f"{prefix}weight"
            if tied and name == "output.weight":
                name = "embedding.token.weight"
            _seeded_normal_(module.weight, std, seed, name)
            if getattr(module, "bias", None) is not None:
                module.bias.zero_()
        elif isinstance(module, RMSNorm | nn.LayerNorm):
            module.weight.fill_(1.0)
            if getattr(module, "bias", None) is not None:
                module.bias.zero_()
        elif isinstance(module, Experts):
            module.init_experts(
                lambda t, std, n, p=prefix: _seeded_normal_(t, std, seed, p + n),
                INIT_STD,
                scaled_std,
            )


def build_model(spec: ModelSpec, *, seed: int, device: torch.device | None = None) -> DecoderChunk:
    """The whole model in one process (no parallelism), initialized from ``seed``."""
    check_model_supported(spec)
    with torch.device(device or torch.device("cpu")):
        model = DecoderChunk(
            spec,
            layer_ids=range(spec.num_layers),
            first=True,
            last=True,
            vocab=padded_vocab_size(spec.vocab_size, 1),
        )
    init_parameters(model, seed=seed, num_layers=spec.num_layers)
    return model
