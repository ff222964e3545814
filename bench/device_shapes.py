"""Kernel shapes of the one-GPU device check (`bench/device_kernels.py`) and what the cost
model prices for each on a stored profile; no torch.

Every price is taken twice: on the raw profile (the single-kernel curves of
`profiles/data/<name>.json`) and on the profile as the Megatron runtime prices it
(`costmodel.execution_presets.framework_profile` with `DEFAULT_OPTIONS`: the fitted
sustained 16-bit and FP8 GEMM factors of `costmodel.fitted_rates` applied), so a measured
figure shows which of the two it meets. Ratios are measured / priced: above 1 the kernel ran
slower than the cost model prices it.

GEMM shapes are (m x k) @ (k x n) triples, three per linear layer as
`costmodel.runtimes.megatron.layer_shape.gemm3` times them: forward (m, n, k), dgrad
(m, k, n), wgrad (k, n, m). A dense layer on one tensor-parallel rank (Megatron-LM
column- and row-parallel linears): QKV (T, a·d/tp + 2·max(g/tp, 1)·d, h), output
projection (T, h, a·d/tp), FC1 (T, 2·F/tp for SwiGLU, h), FC2 (T, h, F/tp), with
T = micro-batch x sequence tokens. A routed expert over R rows: FC1 (R, 2·F_e, h),
FC2 (R, h, F_e), F_e = `ModelSpec.expert_ffn_hidden_size`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from costmodel.attention_core import attention_core_time_s
from costmodel.compute import gemm_time_s, memory_bound_time_s
from costmodel.execution_presets import DEFAULT_OPTIONS, framework_profile
from costmodel.fitted_rates import fp8_gemm_rate_factor, sustained_gemm_rate_factor
from costmodel.flops import core_attention_forward_flops_per_token
from profiles.lookup import memory_bandwidth_Bps
from profiles.schema import HardwareProfile
from profiles.store import load_profile
from specs.model import ModelSpec
from specs.presets import get_preset

DENSE_MODELS = ("llama3-8b", "llama3-70b")
"""Dense models whose layer GEMMs section 1 times."""
DENSE_TPS = (1, 2, 4, 8)
"""Tensor-parallel degrees of the dense layer GEMMs."""
DENSE_TOKENS = 8192
"""Token rows of one dense microbatch on a rank (micro-batch x sequence)."""
EXPERT_MODELS = ("qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3", "gpt-oss-120b")
"""MoE models whose per-expert GEMMs section 1 times."""
TOKENS_PER_EXPERT = (256, 512, 1024, 2048, 4096, 8192)
"""Routed rows per expert of the expert GEMMs."""
ATTENTION_MODELS = ("llama3-70b", "gpt-oss-120b")
"""Models whose attention (heads, query groups, head dim) section 6 times: head dim 128 and
64, both with grouped-query attention."""
ALIGN = 16
"""Granule of shrunk dimensions: FP8 ``torch._scaled_mm`` needs multiples of 16."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GemmShape:
    """One GEMM of a layer pass: (m x k) @ (k x n)."""

    group: str
    """``dense`` (a dense layer's linear) or ``expert`` (one routed expert)."""
    model: str
    """Preset name the shape comes from."""
    gemm: str
    """Linear layer: ``qkv``, ``proj``, ``fc1`` or ``fc2``."""
    pass_name: str
    """``forward``, ``dgrad`` or ``wgrad``."""
    tp: int
    """Tensor-parallel degree (1 for experts)."""
    rows: int
    """Token rows: tokens per rank (dense) or per expert."""
    m: int
    n: int
    k: int

    @property
    def flops(self) -> float:
        """2·m·n·k FLOP."""
        return 2.0 * self.m * self.n * self.k

    def label(self) -> str:
        """Short name for tables, e.g. ``llama3-70b tp8 qkv forward``."""
        where = f"tp{self.tp}" if self.group == "dense" else f"rows{self.rows}"
        return f"{self.model} {where} {self.gemm} {self.pass_name}"

    def shrunk(self, factor: int) -> GemmShape:
        """The shape with m, n and k divided by ``factor`` (tiny shapes for a CPU run)."""
        return dataclasses.replace(
            self, m=shrink(self.m, factor), n=shrink(self.n, factor), k=shrink(self.k, factor)
        )


def shrink(dim: int, factor: int) -> int:
    """``dim`` / ``factor`` rounded to a multiple of `ALIGN`, at least `ALIGN`; ``dim`` itself
    for a factor of 1 or less."""
    if factor <= 1:
        return dim
    return max(ALIGN, round(dim / factor / ALIGN) * ALIGN)


def gemm_passes(m: int, n: int, k: int) -> tuple[tuple[str, int, int, int], ...]:
    """(pass, m, n, k) of the forward, dgrad and wgrad GEMMs of an (m x k) @ (k x n)
    forward (`costmodel.runtimes.megatron.layer_shape.gemm3`)."""
    return (("forward", m, n, k), ("dgrad", m, k, n), ("wgrad", k, n, m))


def layer_gemms(model: ModelSpec, tp: int, tokens: int) -> tuple[tuple[str, int, int, int], ...]:
    """(name, m, n, k) forward GEMMs of a dense layer on one tensor-parallel rank (module
    docstring); key/value heads are replicated when tp exceeds the query groups, as
    `costmodel.runtimes.megatron.attention_costs` counts them."""
    d, h = model.head_dim, model.hidden_size
    q = model.num_attention_heads * d // tp
    kv = max(model.query_groups // tp, 1) * d
    ffn = model.ffn_hidden_size // tp
    up = 2 if model.activation == "swiglu" else 1
    return (
        ("qkv", tokens, q + 2 * kv, h),
        ("proj", tokens, h, q),
        ("fc1", tokens, up * ffn, h),
        ("fc2", tokens, h, ffn),
    )


def expert_gemms(model: ModelSpec, rows: int) -> tuple[tuple[str, int, int, int], ...]:
    """(name, m, n, k) forward GEMMs of one routed expert over ``rows`` rows."""
    width, h = model.expert_ffn_hidden_size, model.hidden_size
    up = 2 if model.activation == "swiglu" else 1
    return (("fc1", rows, up * width, h), ("fc2", rows, h, width))


def pass_shapes(
    group: str, model: str, gemms: tuple[tuple[str, int, int, int], ...], *, tp: int, rows: int
) -> list[GemmShape]:
    """Every pass (`gemm_passes`) of each (name, m, n, k) forward GEMM of ``gemms``, in
    order, as `GemmShape` of ``group`` and preset ``model``."""
    return [
        GemmShape(
            group=group, model=model, gemm=gemm, pass_name=p, tp=tp, rows=rows, m=pm, n=pn, k=pk
        )
        for gemm, m, n, k in gemms
        for p, pm, pn, pk in gemm_passes(m, n, k)
    ]


def dense_shapes(
    models: tuple[str, ...] = DENSE_MODELS,
    tps: tuple[int, ...] = DENSE_TPS,
    tokens: int = DENSE_TOKENS,
) -> list[GemmShape]:
    """Every pass of every layer GEMM of ``models`` at each degree of ``tps``."""
    shapes = []
    for name in models:
        model = get_preset(name)
        for tp in tps:
            shapes += pass_shapes("dense", name, layer_gemms(model, tp, tokens), tp=tp, rows=tokens)
    return shapes


def expert_shapes(
    models: tuple[str, ...] = EXPERT_MODELS, rows: tuple[int, ...] = TOKENS_PER_EXPERT
) -> list[GemmShape]:
    """Every pass of both GEMMs of one expert of ``models`` at each row count of ``rows``."""
    shapes = []
    for name in models:
        model = get_preset(name)
        for r in rows:
            shapes += pass_shapes("expert", name, expert_gemms(model, r), tp=1, rows=r)
    return shapes


def fp8_fast_accum(pass_name: str) -> bool:
    """Whether Transformer Engine runs an FP8 GEMM of ``pass_name`` with fast (single)
    accumulation: forward yes, dgrad and wgrad no (``_2X_ACC_FPROP = False``,
    ``_2X_ACC_DGRAD = True``, ``_2X_ACC_WGRAD = True`` in
    `transformer_engine/pytorch/module/base.py`, passed as ``use_split_accumulator``)."""
    return pass_name == "forward"


# ---- the cost model's side ---------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Profiles:
    """A stored profile raw and as the Megatron runtime prices it."""

    raw: HardwareProfile
    priced: HardwareProfile


def profiles_for(hardware: str) -> Profiles:
    """`Profiles` of the stored profile (or profile file) ``hardware``."""
    raw = load_profile(hardware)
    return Profiles(raw=raw, priced=framework_profile(raw, DEFAULT_OPTIONS))


def compared(measured_s: float | None, raw_s: float, priced_s: float) -> dict[str, object]:
    """A record's comparison fields: the measured and both priced seconds and the ratios
    measured / raw and measured / priced (None without a measurement)."""

    def ratio(model_s: float) -> float | None:
        return measured_s / model_s if measured_s is not None and model_s > 0 else None

    return {
        "measured_s": measured_s,
        "model_raw_s": raw_s,
        "model_priced_s": priced_s,
        "ratio_raw": ratio(raw_s),
        "ratio_priced": ratio(priced_s),
    }


def gemm_model_s(profiles: Profiles, m: int, n: int, k: int, dtype: str) -> tuple[float, float]:
    """(raw, priced) seconds of one GEMM (`costmodel.compute.gemm_time_s`)."""
    return (
        gemm_time_s(profiles.raw, m, n, k, dtype),
        gemm_time_s(profiles.priced, m, n, k, dtype),
    )


def fitted_gemm_factor(profiles: Profiles, dtype: str) -> float:
    """The fitted rate factor the Megatron runtime puts on ``dtype`` GEMMs of the profile:
    FP8 (`fp8_gemm_rate_factor`) or sustained 16-bit (`sustained_gemm_rate_factor`)."""
    if dtype == "fp8":
        return fp8_gemm_rate_factor(profiles.raw, DEFAULT_OPTIONS.fp8_gemm_rate_factor)
    return sustained_gemm_rate_factor(profiles.raw, DEFAULT_OPTIONS.sustained_gemm_rate_factor)


def memory_model_s(profiles: Profiles, bytes_moved: float) -> tuple[float, float]:
    """(raw, priced) seconds of one memory-bound kernel moving ``bytes_moved``
    (`costmodel.compute.memory_bound_time_s`)."""
    return (
        memory_bound_time_s(profiles.raw, bytes_moved),
        memory_bound_time_s(profiles.priced, bytes_moved),
    )


def profile_bandwidth_GBps(profiles: Profiles, bytes_moved: float) -> float:
    """The raw profile's achievable bandwidth at ``bytes_moved``, GB/s."""
    return memory_bandwidth_Bps(profiles.raw, bytes_moved) / 1e9


@dataclass(frozen=True, kw_only=True, slots=True)
class AttentionShape:
    """One causal attention call: batch 1, ``heads`` query heads over ``kv_heads``."""

    model: str
    heads: int
    kv_heads: int
    head_dim: int
    seq: int

    def causal_forward_flops(self) -> float:
        """Forward FLOPs with the causal mask counted as half
        (`costmodel.flops.core_attention_forward_flops_per_token` x seq)."""
        return core_attention_forward_flops_per_token(get_preset(self.model), self.seq) * self.seq

    def label(self) -> str:
        return f"{self.model} d{self.head_dim} {self.heads}/{self.kv_heads} s{self.seq}"


def attention_shape(name: str, seq: int, head_divisor: int = 1) -> AttentionShape:
    """The attention of preset ``name`` at ``seq``; ``head_divisor`` divides the head
    counts (tiny shapes for a CPU run; the FLOPs follow the preset's own heads)."""
    model = get_preset(name)
    return AttentionShape(
        model=name,
        heads=max(model.num_attention_heads // head_divisor, 1),
        kv_heads=max(model.query_groups // head_divisor, 1),
        head_dim=model.head_dim,
        seq=seq,
    )


def attention_model_s(
    profiles: Profiles, shape: AttentionShape, direction: str
) -> tuple[float, float]:
    """(raw, priced) seconds of one pass of the flash attention core
    (`costmodel.attention_core.attention_core_time_s`), the FLOPs scaled to the heads run."""
    preset_heads = get_preset(shape.model).num_attention_heads

    def seconds(profile: HardwareProfile) -> float:
        return attention_core_time_s(
            profile,
            causal_forward_flops=shape.causal_forward_flops() * shape.heads / preset_heads,
            batch_heads=shape.heads,
            seq_q=shape.seq,
            seq_kv=shape.seq,
            head_dim=shape.head_dim,
            precision="bf16",
            kernel="flash",
            direction=direction,  # type: ignore[arg-type]
        )

    return seconds(profiles.raw), seconds(profiles.priced)
