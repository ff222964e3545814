"""The executor's transformer layer, embedding and output layer as operator lists
(`costmodel.runtimes.torch.ops`), with the collectives tensor and context parallelism add.

Tensor parallelism is DTensor ``parallelize_module`` (`executor.tensor_parallel`), which
communicates more often than Megatron-LM: every column-parallel linear wraps its
replicated input with ``from_local``, whose backward all-reduces that linear's input
gradient on its own, so a layer without sequence parallelism all-reduces 2 tensors forward
(after the attention output and FC2) and 5 backward (the inputs of wq, wk, wv, w1, w3).
With sequence parallelism the norms are DTensor modules, ``PrepareModuleInput``
all-gathers the attention and MLP inputs once (reduce-scatter in backward) and the
row-parallel outputs reduce-scatter (all-gather in backward). The embedding is
row-parallel over the vocabulary (an all-reduce, or a reduce-scatter with SP), the output
layer column-parallel with its logits all-gathered so the loss runs on the full
vocabulary on every rank. Collectives are functional (async) but waited for by the next
operator, on the only compute thread: all exposed.

Context parallelism (`executor.context_parallel`) all-gathers K and V per layer (their
gradients reduce-scatter in backward) and runs SDPA of the local queries against every
key with an explicit mask, so the kernel covers the whole (S/cp) x S rectangle: twice the
causal-counted work of its share.
"""

from __future__ import annotations

from costmodel.attention_core import attention_core_time_s
from costmodel.compute import op_overhead_s
from costmodel.flops import core_attention_forward_flops_per_token
from costmodel.runtimes.torch.host_rates import HostRates
from costmodel.runtimes.torch.moe import moe_block
from costmodel.runtimes.torch.ops import (
    FP32,
    Comm,
    HostOps,
    ModuleOps,
    gradient_sum,
    linear,
    norm,
    residual_add,
    rope,
)
from costmodel.runtimes.torch.shapes import RankShape
from costmodel.runtimes.torch.transcendental_rates import COUNTED_BYTES_PER_ELEMENT as BYTES
from profiles.schema import HardwareProfile
from specs.model import ModelSpec
from specs.plan import ParallelPlan


def colwise(
    profile: HardwareProfile, x: RankShape, out_features: float, in_features: int
) -> ModuleOps:
    """A column-parallel linear (``ColwiseParallel``): without SP its replicated input is
    wrapped, and the backward redistributes the partial input gradient (an all-reduce)
    and unwraps it; with SP the input arrives as a DTensor from ``PrepareModuleInput``.
    The local output is unwrapped (``to_local``) either way."""
    base = linear(
        profile, x.tokens, out_features, in_features, dtensor=x.dtensor, accumulate=x.accumulate
    )
    if not x.dtensor:
        return base
    wrap = 0 if x.sp else 1
    size = x.tokens * in_features * FP32
    return base.plus(
        ModuleOps(
            forward=HostOps(dt_wraps=wrap, dt_unwraps=1),
            backward=HostOps(dt_wraps=1, dt_unwraps=wrap, dt_ops=wrap),
            backward_comms=(Comm(lane="tp", op="all_reduce", size_bytes=size),) if wrap else (),
        )
    )


def rowwise(
    profile: HardwareProfile, x: RankShape, out_features: int, in_features: float
) -> ModuleOps:
    """A row-parallel linear (``RowwiseParallel``): wrap the sharded input, redistribute
    the partial output (all-reduce, or reduce-scatter to the sequence shard with SP) and
    unwrap; backward the reverse (an all-gather with SP)."""
    base = linear(
        profile, x.tokens, out_features, in_features, dtensor=x.dtensor, accumulate=x.accumulate
    )
    if not x.dtensor:
        return base
    size = x.tokens * out_features * FP32
    forward_op = "reduce_scatter" if x.sp else "all_reduce"
    return base.plus(
        ModuleOps(
            forward=HostOps(dt_wraps=1, dt_ops=1, dt_unwraps=1),
            backward=HostOps(dt_wraps=1, dt_ops=1, dt_unwraps=1),
            forward_comms=(Comm(lane="tp", op=forward_op, size_bytes=size),),
            backward_comms=(Comm(lane="tp", op="all_gather", size_bytes=size),) if x.sp else (),
        )
    )


def gather_input(x: RankShape, width: int) -> ModuleOps:
    """``PrepareModuleInput(Shard(1) -> Replicate)`` under SP: an all-gather of the block
    input (a reduce-scatter of its gradient)."""
    if not x.sp:
        return ModuleOps()
    size = x.tokens * width * FP32
    return ModuleOps(
        forward=HostOps(dt_ops=1),
        backward=HostOps(dt_ops=1),
        forward_comms=(Comm(lane="tp", op="all_gather", size_bytes=size),),
        backward_comms=(Comm(lane="tp", op="reduce_scatter", size_bytes=size),),
    )


def input_gradient_sum(x: RankShape, width: int, uses: int) -> ModuleOps:
    """Gradients of a block input read by ``uses`` column-parallel linears: plain adds, or
    DTensor adds under SP (the input is then a DTensor)."""
    if x.sp:
        return ModuleOps(backward=HostOps(dt_ops=max(uses - 1, 0)))
    return gradient_sum(x.tokens, width, uses)


def attention_core(
    model: ModelSpec, profile: HardwareProfile, rates: HostRates, x: RankShape
) -> ModuleOps:
    """``F.scaled_dot_product_attention`` (causal), or under CP the K/V all-gather and the
    masked SDPA over all keys (module doc). Kernel times are the profile's fp32 attention
    curves less one dispatch; the backward sample of the profile ran one autograd call,
    taken out too. CP: per tensor (K, V) a permuted copy (2 passes), the functional
    all-gather and its wait; backward a reduce-scatter each and the nodes of the copy, the
    permutes and the gather."""
    heads = model.num_attention_heads / x.tp
    flops = core_attention_forward_flops_per_token(model, x.seq) * x.tokens / x.tp
    keys = x.seq
    if x.cp > 1:
        flops *= 2  # the explicit mask computes the whole local-queries x keys rectangle
    kernel = {}
    for direction in ("forward", "backward"):
        t = attention_core_time_s(
            profile,
            causal_forward_flops=flops,
            batch_heads=x.micro_batch * heads,
            seq_q=x.tokens / x.micro_batch,
            seq_kv=keys,
            head_dim=model.head_dim,
            precision="fp32",
            kernel="flash",
            direction=direction,
        )
        kernel[direction] = max(t - op_overhead_s(profile), 0.0)
    kernel["backward"] = max(kernel["backward"] - rates.backward_call_s, 0.0)
    core = ModuleOps(
        forward=HostOps(ops=1, kernel_s=kernel["forward"]),
        backward=HostOps(ops=1, kernel_s=kernel["backward"]),
    )
    if x.cp == 1:
        return core
    kv = max(model.query_groups // x.tp, 1) * model.head_dim
    gathered = x.cp * x.tokens * kv * FP32
    exchange = ModuleOps(
        forward=HostOps(ops=2 * 3, views=2 * 2 + 1, allocs=2, bytes=2 * 2 * x.tokens * kv * FP32),
        backward=HostOps(ops=2 * 3, allocs=2),
        forward_comms=(Comm(lane="cp", op="all_gather", size_bytes=gathered, count=2),),
        backward_comms=(Comm(lane="cp", op="reduce_scatter", size_bytes=gathered, count=2),),
    )
    return core.plus(exchange)


def attention_block(
    model: ModelSpec, profile: HardwareProfile, rates: HostRates, x: RankShape
) -> ModuleOps:
    """``x + Attention(norm(x))`` of `executor.model.TransformerBlock`.

    Besides the linears, norm, rotary and core: three ``view`` and three ``transpose`` to
    the head layout, and the output's transpose and ``reshape`` (a copy of the
    non-contiguous tensor, 2·T·Q·e); their backward nodes move no data."""
    d = model.hidden_size
    q = model.num_attention_heads * model.head_dim / x.tp
    kv = max(model.query_groups // x.tp, 1) * model.head_dim
    layout = ModuleOps(
        forward=HostOps(ops=1, views=3 + 3 + 1, allocs=1, bytes=2 * x.tokens * q * FP32),
        backward=HostOps(ops=3 + 3 + 2),
    )
    parts = [
        norm(model.normalization, x.norm_tokens, d, dtensor=x.sp),
        gather_input(x, d),
        colwise(profile, x, q, d),
        colwise(profile, x, kv, d),
        colwise(profile, x, kv, d),
        input_gradient_sum(x, d, 3),
        layout,
        attention_core(model, profile, rates, x),
        rowwise(profile, x, d, q),
        residual_add(x.norm_tokens, d),
    ]
    if model.position_embedding == "rope":
        parts += [rope(x.tokens * q), rope(x.tokens * kv)]
    return _sum(parts)


def mlp(profile: HardwareProfile, model: ModelSpec, x: RankShape, ffn: int) -> ModuleOps:
    """`executor.model.MLP` of inner size ``ffn`` (dense or shared expert), its input
    already normalized: SwiGLU w2(silu(w1 x) · w3 x) or GELU w2(gelu(w1 x)).

    silu/gelu: 2·T·F·e forward, a node of 3·T·F·e backward, one transcendental kernel of
    T·F elements each way; the product: 3·T·F·e forward, a node with two gradient kernels (6·T·F·e)
    backward."""
    if ffn == 0:
        return ModuleOps()
    d, width = model.hidden_size, ffn / x.tp
    gated = model.activation == "swiglu"
    n = x.tokens * width
    transcendental = {"activation_kernels": 1, "activation_elements": n}
    act = ModuleOps(
        forward=HostOps(ops=1, allocs=1, bytes=n * BYTES["silu"], **transcendental),
        backward=HostOps(ops=1, allocs=1, bytes=n * BYTES["silu_backward"], **transcendental),
    )
    parts = [colwise(profile, x, width, d), act, rowwise(profile, x, d, width)]
    if gated:
        product = ModuleOps(
            forward=HostOps(ops=1, allocs=1, bytes=3 * n * FP32),
            backward=HostOps(ops=1, kernels=1, allocs=2, bytes=6 * n * FP32),
        )
        parts += [colwise(profile, x, width, d), product, input_gradient_sum(x, d, 2)]
    return _sum(parts)


def moe_ffn(
    model: ModelSpec, profile: HardwareProfile, plan: ParallelPlan, x: RankShape
) -> ModuleOps:
    """`executor.moe.MoE` on its normalized input (`costmodel.runtimes.torch.moe.moe_block`)
    with its shared expert's input gather and MLP when the model has one."""
    shared = model.moe_shared_expert_size
    d = model.hidden_size
    expert = [gather_input(x, d), mlp(profile, model, x, shared)] if shared else []
    return moe_block(model, profile, plan, x, expert)


MODULE_CALLS_PER_LAYER = 13
"""``nn.Module`` calls of one dense layer's forward (block, two norms, attention, wq, wk,
wv, wo, the core, MLP, w1, w3, w2), each priced as one dispatch (``__call__`` and its
hook checks run before the module's own operators)."""


def layer_ops(
    model: ModelSpec,
    profile: HardwareProfile,
    rates: HostRates,
    plan: ParallelPlan,
    x: RankShape,
    *,
    is_moe: bool,
) -> ModuleOps:
    """One `executor.model.TransformerBlock`: attention, then the MLP (or MoE) block."""
    d = model.hidden_size
    ffn_part = [norm(model.normalization, x.norm_tokens, d, dtensor=x.sp)]
    if is_moe:
        ffn_part.append(moe_ffn(model, profile, plan, x))
        ffn_part.append(residual_add(x.norm_tokens, d))
    else:
        ffn_part += [gather_input(x, d), mlp(profile, model, x, model.ffn_hidden_size)]
        ffn_part.append(residual_add(x.norm_tokens, d))
    ffn_part.append(ModuleOps(forward=HostOps(views=MODULE_CALLS_PER_LAYER)))
    return attention_block(model, profile, rates, x).plus(_sum(ffn_part))


def embedding_ops(model: ModelSpec, x: RankShape, vocab: int) -> ModuleOps:
    """`executor.model.Embedding`: the token lookup (2·T·D·e), plus a learned position
    table (arange, a second lookup and an add) when the spec has one. Backward: the dense
    embedding backward zero-fills the (vocab / tp) x D gradient and scatter-adds the
    tokens' rows, then AccumulateGrad. Under TP (row-parallel over the vocabulary) the
    token ids are wrapped, the masked lookup runs as a DTensor operator (four local
    masking operators), and the partial output is all-reduced (reduce-scattered with SP)."""
    d, t = model.hidden_size, x.tokens
    rows = vocab / x.tp
    fwd = HostOps(ops=1, allocs=1, bytes=2 * t * d * FP32)
    bwd = HostOps(
        ops=2, allocs=1, bytes=(rows * d + 2 * t * d + x.accumulate * 3 * rows * d) * FP32
    )
    ops = ModuleOps(forward=fwd, backward=bwd)
    if model.position_embedding == "learned":
        ops = ops.plus(
            ModuleOps(
                forward=HostOps(ops=3, bytes=5 * t * d * FP32),
                backward=HostOps(
                    ops=3, bytes=(2 * t * d + model.max_position_embeddings * d) * FP32
                ),
            )
        )
    if not x.dtensor:
        return ops
    size = t * d * FP32
    return ops.plus(
        ModuleOps(
            forward=HostOps(dt_wraps=1, dt_ops=2, ops=4, dt_unwraps=1),
            backward=HostOps(dt_wraps=1, dt_ops=3),
            forward_comms=(
                Comm(lane="tp", op="reduce_scatter" if x.sp else "all_reduce", size_bytes=size),
            ),
            backward_comms=(Comm(lane="tp", op="all_gather", size_bytes=size),) if x.sp else (),
        )
    )


def head_ops(model: ModelSpec, profile: HardwareProfile, x: RankShape, vocab: int) -> ModuleOps:
    """Final norm, output layer and `executor.pipeline.lm_loss` of the last chunk.

    The loss flattens logits and targets (views) and runs ``F.cross_entropy`` (log_softmax
    reading the logits twice and writing them once, then nll_loss: 3·T·V·e); backward the
    View, LogSoftmax (3·T·V·e) and NllLoss (a zero-filled T·V gradient) nodes; log_softmax
    is one transcendental kernel of T·V elements each way. Under TP the
    logits are all-gathered to the whole vocabulary (so the loss is not split), the input
    is wrapped (all-gathered from the sequence shard with SP) and its partial gradient
    all-reduced (reduce-scattered with SP)."""
    d = model.hidden_size
    out = linear(profile, x.tokens, vocab / x.tp, d, dtensor=x.dtensor, accumulate=x.accumulate)
    n = x.tokens * vocab
    log_softmax = {"log_softmax_kernels": 1, "log_softmax_elements": n}
    loss = ModuleOps(
        forward=HostOps(ops=2, views=3, allocs=2, bytes=n * BYTES["log_softmax"], **log_softmax),
        backward=HostOps(
            ops=3, allocs=2, bytes=n * (BYTES["log_softmax_backward"] + FP32), **log_softmax
        ),
    )
    parts = [norm(model.normalization, x.norm_tokens, d, dtensor=x.sp), out, loss]
    if x.dtensor:
        size = x.tokens * d * FP32
        wrap = 0 if x.sp else 1
        grad_op = "reduce_scatter" if x.sp else "all_reduce"
        forward_comms = (Comm(lane="tp", op="all_gather", size_bytes=n * FP32),)
        if x.sp:
            forward_comms += (Comm(lane="tp", op="all_gather", size_bytes=size),)
        parts.append(
            ModuleOps(
                forward=HostOps(dt_wraps=wrap, dt_ops=1 + x.sp, dt_unwraps=1),
                backward=HostOps(dt_wraps=1, dt_ops=2, dt_unwraps=wrap),
                forward_comms=forward_comms,
                backward_comms=(Comm(lane="tp", op=grad_op, size_bytes=size),),
            )
        )
    return _sum(parts)


def _sum(parts: list[ModuleOps]) -> ModuleOps:
    total = ModuleOps()
    for part in parts:
        total = total.plus(part)
    return total
