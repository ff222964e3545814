"""What the profiler measures: GEMM shapes, attention grids, tensor and message sizes.

Pure functions of (device kind, quick or full, optional model); no torch. The sweeps
interleave the points a fit uses with points it never sees (`holdout`), so each run can
report how well its own fits reproduce measurements they were not fitted on.

Shapes follow Megatron-LM's per-rank GEMMs (Narayanan et al. 2021, §3.2 column- and
row-parallel linears): with T tokens per microbatch, hidden h, heads a with head dim d,
query groups g, MLP width F and vocabulary V padded to a multiple of 128·tp,
QKV is T x h -> (a + 2g)·d/tp, the attention projection a·d/tp -> h, the MLP h -> F/tp
(twice, or fused to 2F/tp, for SwiGLU) and F/tp -> h, the logits h -> V/tp. Each linear
also has its backward pair: dgrad (T x n) @ (n x k) and wgrad (n x T) @ (T x k).
"""

from __future__ import annotations

from dataclasses import dataclass

from specs.model import ModelSpec

GemmShape = tuple[str, int, int, int, str]
"""(dtype, m, n, k, pattern); pattern `linear`, `dgrad` or `wgrad` (see `timing`)."""
AttentionShape = tuple[str, int, int, int, int]
"""(dtype, batch, heads, seq_len, head_dim)."""

VOCAB_DIVISOR = 128
"""Megatron pads the vocabulary to a multiple of 128·tp (`--make-vocab-size-divisible-by`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SweepPlan:
    """Every point one profiling run measures."""

    primary_dtype: str
    """dtype measured densely: `fp32` on CPU (the executor's CPU precision), `bf16` on GPU."""
    gemms: tuple[GemmShape, ...]
    """GEMMs on the efficiency curves, in increasing work per dtype."""
    misaligned_gemms: tuple[tuple[GemmShape, GemmShape], ...]
    """(aligned, misaligned) pairs for `gemm_misaligned_factor`."""
    alignment_elements: int
    """Granule every dimension is a multiple of in `gemms`."""
    attention: tuple[AttentionShape, ...]
    """Causal attention shapes, each timed forward and backward."""
    memory_elements: tuple[int, ...]
    """Tensor sizes (elements) of copy, add and RMSNorm-like sweeps."""
    adamw_params: tuple[int, ...]
    """Parameter counts of the optimizer-step sweep."""
    message_bytes: tuple[int, ...]
    """Collective sizes, nccl-tests convention."""
    max_call_s: float
    """A point predicted to take longer than this per call (from the rate measured so
    far) is skipped, so a model's largest GEMMs cannot blow the time budget."""


def _powers(lo_exp: int, hi_exp: int, step: int = 1) -> tuple[int, ...]:
    """2**lo_exp, 2**(lo_exp + step), ... up to 2**hi_exp."""
    return tuple(2**e for e in range(lo_exp, hi_exp + 1, step))


def _quarter_octaves(lo_exp: int, hi_exp: int) -> tuple[int, ...]:
    """2**lo_exp, 5·2**(lo_exp - 2), 3·2**(lo_exp - 1), 7·2**(lo_exp - 2), 2**(lo_exp + 1),
    ... up to 2**hi_exp (multiples of 1024 from lo_exp 12 on, as the RMSNorm-like rows
    need)."""
    sizes = []
    for e in range(lo_exp, hi_exp + 1):
        sizes.append(2**e)
        if e < hi_exp:
            sizes += [5 * 2 ** (e - 2), 3 * 2 ** (e - 1), 7 * 2 ** (e - 2)]
    return tuple(sizes)


def transformer_gemms(dtype: str, tokens: tuple[int, ...], hiddens: tuple[int, ...]) -> list:
    """Generic transformer GEMMs: projection h->h, MLP up h->4h and down 4h->h, forward
    layout, for every token count and hidden size."""
    shapes = []
    for t in tokens:
        for h in hiddens:
            shapes += [(dtype, t, h, h, "linear"), (dtype, t, 4 * h, h, "linear")]
            shapes.append((dtype, t, h, 4 * h, "linear"))
    return shapes


def linear_with_backward(dtype: str, m: int, n: int, k: int) -> list[GemmShape]:
    """A linear (m x k) -> (m x n) and its dgrad and wgrad GEMMs."""
    return [(dtype, m, n, k, "linear"), (dtype, m, k, n, "dgrad"), (dtype, n, k, m, "wgrad")]


def candidate_tp(model: ModelSpec, world_size: int) -> tuple[int, ...]:
    """TP degrees a plan on ``world_size`` ranks may use: powers of two up to the world
    that divide the heads and the query groups (Megatron's TP rules)."""
    degrees = []
    tp = 1
    while tp <= world_size:
        if model.num_attention_heads % tp == 0 and model.query_groups % tp == 0:
            degrees.append(tp)
        tp *= 2
    return tuple(degrees)


def model_gemms(
    model: ModelSpec, dtype: str, tokens: tuple[int, ...], world_size: int
) -> list[GemmShape]:
    """The exact per-rank GEMMs of ``model`` (forward, dgrad, wgrad) at each token count
    under every candidate TP degree (module docstring)."""
    h, d, a, g = model.hidden_size, model.head_dim, model.num_attention_heads, model.query_groups
    shapes: list[GemmShape] = []
    for tp in candidate_tp(model, world_size):
        vocab = -(-model.vocab_size // (VOCAB_DIVISOR * tp)) * VOCAB_DIVISOR * tp
        outs = [((a + 2 * g) * d // tp, h), (h, a * d // tp), (vocab // tp, h)]
        ffn = model.ffn_hidden_size // tp
        outs += [(ffn, h), (h, ffn)]
        if model.activation == "swiglu":
            outs.append((2 * ffn, h))
        for t in tokens:
            for n, k in outs:
                shapes += linear_with_backward(dtype, t, n, k)
            if model.is_moe:
                shapes += _moe_gemms(model, dtype, t)
    return shapes


def _moe_gemms(model: ModelSpec, dtype: str, tokens: int) -> list[GemmShape]:
    """Expert GEMMs with an even router: tokens·top_k/E rows per expert (etp = 1), on rows of
    `ModelSpec.expert_hidden_size`; a latent MoE layer's h -> ℓ and ℓ -> h projections on
    every token."""
    h, f = model.expert_hidden_size, model.expert_ffn_hidden_size
    rows = max(1, -(-tokens * model.moe_top_k // model.num_experts))
    widths = (2 * f, f) if model.activation == "swiglu" else (f,)
    shapes = []
    for n in widths:
        shapes += linear_with_backward(dtype, rows, n, h)
    shapes += linear_with_backward(dtype, rows, h, f)
    hidden, latent = model.hidden_size, model.moe_latent_size
    if model.moe_shared_expert_size:
        shapes += linear_with_backward(dtype, tokens, model.moe_shared_expert_size, hidden)
    if latent is not None:
        shapes += linear_with_backward(dtype, tokens, latent, hidden)
        shapes += linear_with_backward(dtype, tokens, hidden, latent)
    return shapes


def _sorted_unique(shapes: list) -> tuple:
    return tuple(sorted(set(shapes), key=lambda s: (s[0], 2 * s[1] * s[2] * s[3], s)))


def sweep_plan(*, cuda: bool, quick: bool, model: ModelSpec | None, world_size: int) -> SweepPlan:
    """The points of one run: CPU or GPU scale, `--quick` or full, plus ``model``'s own."""
    if cuda:
        return _gpu_plan(quick, model, world_size)
    return _cpu_plan(quick, model, world_size)


def _cpu_plan(quick: bool, model: ModelSpec | None, world_size: int) -> SweepPlan:
    tokens = (32, 64, 128, 256, 512, 1024) if quick else _powers(5, 12)
    hiddens = (64, 128, 256, 512) if quick else _powers(6, 11)
    gemms = transformer_gemms("fp32", tokens, hiddens)
    # bf16 on a CPU without bf16 FMA units runs tens of times slower: a few small shapes
    # give its curve without spending the budget.
    gemms += transformer_gemms("bf16", (64, 256), (64, 128, 256))
    model_tokens = (128, 512, 2048) if quick else (128, 256, 512, 1024, 2048, 4096)
    head_dims = {32, 64} if quick else {32, 64, 128}
    if model is not None:
        gemms += model_gemms(model, "fp32", model_tokens, world_size)
        head_dims.add(model.head_dim)
    seqs = _powers(6, 10) if quick else _powers(6, 12)
    tokens_per_shape = 512 if quick else 2048
    attention = [
        ("fp32", max(1, tokens_per_shape // s), 4, s, d) for d in sorted(head_dims) for s in seqs
    ]
    attention += [
        ("fp32", max(1, tokens_per_shape // s), 4, s * 3 // 2, d)
        for d in sorted(head_dims)
        for s in seqs[:-1]
    ]
    attention += [("bf16", 2, 4, s, 64) for s in (64, 96, 128, 256)]
    return SweepPlan(
        primary_dtype="fp32",
        gemms=_sorted_unique(gemms),
        misaligned_gemms=_misaligned_pairs("fp32", 8, (128, 256, 512)),
        alignment_elements=8,
        attention=_by_work(attention),
        # 64 KiB to 4 MiB: the activations of the small models a CPU trains, which stay
        # in the caches. Larger tensors run at DRAM bandwidth, and from 32 MiB they come
        # from fresh mmaps (glibc's largest dynamic mmap threshold) that page-fault on
        # every call: other regimes. Quarter octaves, so that the fitted size curve
        # (`ComputeProfile.memory_bandwidth_curve`) follows the step from the per-core
        # cache to the shared one with several points on each side.
        memory_elements=_quarter_octaves(14, 20),
        adamw_params=(2**16, 2**18, 2**20) if quick else _powers(16, 24, 2),
        # Quick: the sizes small CPU models exchange (activations and gradient buckets of a
        # few MiB at most); beyond about 8 MiB loopback copies leave the caches and run at
        # half the bandwidth, which one α-β line cannot follow together with small sizes.
        message_bytes=_powers(10, 22) if quick else _powers(10, 28),
        max_call_s=0.06 if quick else 0.3,
    )


def _gpu_plan(quick: bool, model: ModelSpec | None, world_size: int) -> SweepPlan:
    tokens = _powers(7, 13, 2) if quick else _powers(7, 14)
    hiddens = (512, 1024, 2048, 4096, 8192) if quick else _powers(8, 14)
    gemms = []
    for dtype in ("bf16", "fp16", "fp32"):
        gemms += transformer_gemms(dtype, tokens if dtype == "bf16" else tokens[::2], hiddens)
    head_dims = {64, 128, 256}
    if model is not None:
        gemms += model_gemms(model, "bf16", (2048, 8192), world_size)
        head_dims.add(model.head_dim)
    seqs = _powers(9, 14)
    attention = []
    for dtype in ("bf16", "fp16"):
        for d in sorted(head_dims):
            heads = max(1, 2048 // d)  # FlashAttention benchmarks: 16k tokens, width 2048
            attention += [(dtype, max(1, 16384 // s), heads, s, d) for s in seqs]
            attention += [(dtype, max(1, 16384 // s), heads, s * 3 // 2, d) for s in seqs[:-1]]
    return SweepPlan(
        primary_dtype="bf16",
        gemms=_sorted_unique(gemms),
        misaligned_gemms=_misaligned_pairs("bf16", 32, (2048, 4096, 8192)),
        alignment_elements=32,
        attention=_by_work(attention),
        memory_elements=_powers(20, 28) if quick else _powers(18, 30),
        adamw_params=(2**20, 2**24) if quick else _powers(20, 28, 2),
        message_bytes=_powers(10, 26) if quick else _powers(10, 28),
        max_call_s=0.05 if quick else 0.5,
    )


def _by_work(attention: list[AttentionShape]) -> tuple[AttentionShape, ...]:
    """Unique attention shapes, per dtype in increasing work (b·h·s²·d)."""
    return tuple(sorted(set(attention), key=lambda a: (a[0], a[1] * a[2] * a[3] ** 2 * a[4], a)))


def _misaligned_pairs(dtype: str, granule: int, widths: tuple[int, ...]) -> tuple:
    """(aligned, misaligned) GEMMs of the same size class: n off the granule by half."""
    return tuple(
        ((dtype, w, w, w, "linear"), (dtype, w, w + granule // 2 + 1, w, "linear")) for w in widths
    )


def holdout(count: int, every: int = 4) -> tuple[bool, ...]:
    """Which of ``count`` points, ordered by size, a fit leaves out for validation.

    Every ``every``-th point from the second on, never the first or last (the fit must
    span the measured range, so held-out points are interpolations).
    """
    return tuple(0 < i < count - 1 and i % every == every // 2 for i in range(count))
