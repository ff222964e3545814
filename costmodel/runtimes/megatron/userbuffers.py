"""Transformer Engine's userbuffers overlap of tensor-parallel communication with the GEMMs
(Megatron-LM ``--tp-comm-overlap``, with sequence parallelism), priced per column-parallel /
row-parallel GEMM pair of a layer.

TE (``initialize_ub`` in `transformer_engine/pytorch/module/base.py`; kernels in
`transformer_engine/common/comm_gemm_overlap/comm_gemm_overlap.cpp`) names each overlapped
GEMM and gives it one method:

- ``ring_exchange``: the all-gather before a column-parallel GEMM (``qkv_fprop``,
  ``fc1_fprop``) or before a row-parallel dgrad (``proj_dgrad``, ``fc2_dgrad``) becomes tp-1
  copy-engine sends of S/tp bytes to the next rank, each under the GEMM of the chunk already
  present; as the reduce-scatter of a row-parallel forward GEMM (``proj_fprop``,
  ``fc2_fprop`` when `ExecutionOptions.tp_overlap_rs_method` is ``ring_exchange``,
  ``CommOverlapP2PBase::split_overlap_rs``), tp GEMM chunks each produce one rank's partial
  output, sent under the next chunk, and one kernel sums the tp partials
  (``reduce_bf16``);
- ``pipeline`` (TE's default for ``proj_fprop``/``fc2_fprop``): 4 GEMM chunks, each chunk's
  reduce-scatter under the next chunk, the last one after it; with ``set_sm_margin`` (TE's
  default from v2.0, `ExecutionOptions.tp_overlap_pipeline_sm_margin`) the chunks run on
  SMs - 16, without it (TE before v2.0) on every SM, sharing them while a reduce-scatter
  runs;
- ``bulk``: the all-gather of the layer input under ``qkv_dgrad``/``fc1_dgrad`` and the
  reduce-scatter of its gradient under ``qkv_wgrad``/``fc1_wgrad``; with ``set_sm_margin``
  (TE's default, `ExecutionOptions.tp_overlap_bulk_sm_margin`) the GEMMs run on SMs - 16
  throughout, without it they keep every SM and lose the communication kernel's share only
  while it runs.

The ``pipeline`` and ``bulk`` collectives are userbuffers kernels over NVLink, not NCCL
calls (`userbuffers_collective_time_s`).

S is the full activation of one microbatch on a rank (tokens x hidden x element bytes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from costmodel import compute as ops
from costmodel.collectives import collective_time_s, ring_exchange_time_s
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.topology import GroupPlacement
from profiles.lookup import bus_factor, collective_fit
from profiles.schema import HardwareProfile

Shape = tuple[float, float, float]
"""(m, n, k) of an (m x k) @ (k x n) GEMM."""

TP_OVERLAP_COMM_SMS = 16
"""SMs that Transformer Engine's ``pipeline`` and ``bulk`` userbuffers overlaps give their
communication kernels, the GEMM running on the others (``initialize_ub`` default config:
``num_sm`` 16, ``set_sm_margin`` True except for ``ring_exchange``;
`transformer_engine/pytorch/module/base.py`; ``CommOverlapBase``: ``_math_sms = sm_count -
num_comm_sm``, `transformer_engine/common/comm_gemm_overlap/comm_gemm_overlap.cpp`)."""

TP_OVERLAP_RS_SPLITS = 4
"""Chunks of the ``pipeline`` reduce-scatter overlap of the row-parallel forward GEMMs
(``proj_fprop``, ``fc2_fprop``; ``initialize_ub`` default ``num_splits`` 4)."""

USERBUFFERS_STEP_LATENCY_S = 3.4e-6
"""Latency of one ``ring_exchange`` step of Transformer Engine's userbuffers inside a
scale-up domain. The step is a copy-engine transfer to the neighbour's registered buffer
(``initialize_ub`` default ``use_ce`` True; ``userbuffers_send`` in
`transformer_engine/common/comm_gemm_overlap/comm_gemm_overlap.cpp`), not an NCCL call, so it
pays one NVLink hop rather than the whole-call latency of the profile's ``send_recv`` fit:
NCCL's own model puts an NVLink hop at 3.4 us (Simple protocol, ring; NCCL
`src/graph/tuning.cc`, reference/hardware.md §2f)."""

SM_COUNT_BY_DEVICE = (
    ("A100", 108),
    ("H100", 132),
    ("H200", 132),
    ("B300", 160),
    ("B200", 148),
)
"""Device-name fragment -> streaming multiprocessors (NVIDIA A100 and H100 architecture
whitepapers: 108 SMs on A100 SXM4, 132 on H100 SXM5 and H200 SXM; Blackwell: 148 on B200
and GB200, 160 on B300 and GB300, NVIDIA technical blog "Inside NVIDIA Blackwell Ultra");
first match wins. Devices not listed are priced without the SM margin."""


def sm_count(profile: HardwareProfile) -> int | None:
    """Streaming multiprocessors of the profile's device (`SM_COUNT_BY_DEVICE`), or None."""
    name = profile.device.name
    return next((n for fragment, n in SM_COUNT_BY_DEVICE if fragment in name), None)


def userbuffers_step_time_s(
    profile: HardwareProfile, chunk_bytes: float, group: GroupPlacement
) -> float:
    """Seconds of one userbuffers ring-exchange step that sends ``chunk_bytes`` to the next
    rank: `USERBUFFERS_STEP_LATENCY_S` plus the bytes at the profile's intra-domain
    point-to-point bus bandwidth (``send_recv`` fit); a group that spans scale-up domains
    runs at the inter-domain send rate (`costmodel.collectives.ring_exchange_time_s`)."""
    if group.size < 2 or chunk_bytes <= 0:
        return 0.0
    if group.num_domains > 1:
        return ring_exchange_time_s(profile, chunk_bytes, 1, group)
    fit = collective_fit(profile, "send_recv", 2, "intra")
    return USERBUFFERS_STEP_LATENCY_S + chunk_bytes / (fit.busbw_GBps * 1e9)


def userbuffers_collective_time_s(
    profile: HardwareProfile, op: str, size_bytes: float, group: GroupPlacement
) -> float:
    """Seconds of one userbuffers ``reduce_scatter`` or ``all_gather`` kernel of
    ``size_bytes`` (nccl-tests size) over a TP group inside one scale-up domain: the chunk
    reduce-scatters of the ``pipeline`` overlap (``reducescatter2_userbuff_stridedoutput``
    in ``split_overlap_rs``) and the ``bulk`` all-gather and reduce-scatter
    (``allgather2_userbuff_inplace``, ``reducescatter2_userbuff_inplace`` in
    ``bulk_overlap``; `transformer_engine/pytorch/csrc/comm_gemm_overlap.h` v1.8,
    `transformer_engine/common/comm_gemm_overlap/comm_gemm_overlap.cpp` v2.x). Each is
    one kernel on the communication SMs, not an NCCL call: every rank writes a flag into
    each peer's registered buffer, waits for the peers' flags, then reads (reduce-scatter)
    or writes (all-gather) the peers' chunks directly over NVLink
    (``userbuffers_fp16_sum_inplace_gpu_rr_rs_oop_stride``,
    `transformer_engine/pytorch/csrc/userbuffers/userbuffers.cu`). It pays one NVLink hop
    of latency (`USERBUFFERS_STEP_LATENCY_S`) in place of the NCCL call's, and the bytes
    at the profile's bus bandwidth for ``op`` (size · (n − 1)/n / busbw). A group that
    spans scale-up domains is priced as the NCCL collective
    (`costmodel.collectives.collective_time_s`)."""
    if group.size < 2 or size_bytes <= 0:
        return 0.0
    if group.num_domains > 1:
        return collective_time_s(profile, op, size_bytes, group)
    fit = collective_fit(profile, op, group.size, "intra")
    factor = bus_factor(op, group.size)
    return USERBUFFERS_STEP_LATENCY_S + size_bytes * factor / (fit.busbw_GBps * 1e9)


def ring_reduce_time_s(profile: HardwareProfile, size_bytes: float, tp: int) -> float:
    """The kernel that ends a ``ring_exchange`` reduce-scatter: it reads the tp partial
    outputs of S/tp bytes each and writes their sum, (tp + 1)·S/tp bytes, memory-bound
    (``reduce_bf16`` after the GEMM chunks in ``CommOverlapP2PBase::split_overlap_rs``)."""
    return ops.memory_bound_time_s(profile, (tp + 1) * size_bytes / tp)


def tp_overlap_pair_s(
    profile: HardwareProfile,
    tp: int,
    dtype: str,
    size_bytes: float,
    group: GroupPlacement,
    first: Shape,
    second: Shape | None,
    *,
    options: ExecutionOptions = DEFAULT_OPTIONS,
    gather_bytes: float | None = None,
    first_gather_s: float | None = None,
) -> tuple[float, float]:
    """Seconds `--tp-comm-overlap` adds to one GEMM pair beyond its GEMMs (forward,
    backward). ``size_bytes`` is what each reduce-scatter moves (S, 16-bit), ``gather_bytes``
    A what each all-gather moves (S when None; the FP8 copy of an fp8 job,
    `costmodel.runtimes.megatron.linear_pairs.userbuffers_all_gather_bytes`). ``first`` is
    the column-parallel GEMM, ``second`` the row-parallel one (None for a layer without its
    own, MLA here: its reduce-scatter and the backward all-gather are then exposed, NCCL
    calls). The forward is the ``ring_exchange`` all-gather of ``first``
    (`OverlapGemms.ring`) and the reduce-scatter of ``second`` (`_row_forward_rs_s`); the
    backward the ``ring_exchange`` all-gather of ``second``'s dgrad and the ``bulk``
    overlaps of ``first`` (`_bulk_backward_s`).

    ``first_gather_s``: the forward all-gather of ``first`` runs outside userbuffers, a
    blocking NCCL call of that many seconds before the whole GEMM, in place of the ring
    exchange (TE ``_LayerNormLinear.forward`` turns ``ub_overlap_ag_fprop`` off when the
    module returns its norm output, ``not return_layernorm_output``, v2.5 to HEAD: a LoRA
    adapter on the layer, `costmodel.runtimes.megatron.linear_pairs.tp_pair`).
    """
    sms = sm_count(profile)
    slow = sms / (sms - TP_OVERLAP_COMM_SMS) if sms else 1.0
    gathered = size_bytes if gather_bytes is None else gather_bytes
    gemms = OverlapGemms(profile=profile, tp=tp, dtype=dtype, group=group, gathered=gathered)
    forward = gemms.ring(*first) if first_gather_s is None else first_gather_s
    if second is None:
        forward += collective_time_s(profile, "reduce_scatter", size_bytes, group)
        backward = collective_time_s(profile, "all_gather", gathered, group)
    else:
        forward += _row_forward_rs_s(gemms, second, size_bytes, options, slow)
        m2, n2, k2 = second
        backward = gemms.ring(m2, k2, n2)
    backward += _bulk_backward_s(gemms, first, size_bytes, options, slow)
    return max(0.0, forward), max(0.0, backward)


@dataclass(frozen=True, kw_only=True)
class OverlapGemms:
    """The GEMMs of one pair under userbuffers on one rank: ``dtype`` GEMMs on ``profile``,
    a TP group ``group`` of ``tp`` ranks, and ``gathered`` bytes (A) in each all-gather."""

    profile: HardwareProfile
    tp: int
    dtype: str
    group: GroupPlacement
    gathered: float

    def gemm(self, m: float, n: float, k: float) -> float:
        """Seconds of one (m, n, k) GEMM, each dimension at least one row
        (`costmodel.compute.gemm_time_s`)."""
        return ops.gemm_time_s(self.profile, _rows(m), _rows(n), _rows(k), self.dtype)

    def ring(self, m: float, n: float, k: float, moved: float | None = None) -> float:
        """Seconds a ``ring_exchange`` overlap adds to the (m, n, k) GEMM: tp·g - G +
        (tp - 1)·max(0, p - g), g a GEMM of m/tp rows, G the whole GEMM, p one send of
        ``moved``/tp bytes (`userbuffers_step_time_s`; ``moved`` A when None)."""
        moved = self.gathered if moved is None else moved
        chunk = self.gemm(m / self.tp, n, k)
        send = userbuffers_step_time_s(self.profile, moved / self.tp, self.group)
        return self.tp * chunk - self.gemm(m, n, k) + (self.tp - 1) * max(0.0, send - chunk)


def _row_forward_rs_s(
    gemms: OverlapGemms, second: Shape, size_bytes: float, options: ExecutionOptions, slow: float
) -> float:
    """Seconds the reduce-scatter of the row-parallel forward GEMM ``second`` adds, by
    `ExecutionOptions.tp_overlap_rs_method`: ``ring_exchange``, `OverlapGemms.ring` with
    sends of S/tp (the partial outputs are 16-bit) plus the reduction of the tp partials
    (`ring_reduce_time_s`); ``pipeline``, 4·g' - G + r + 3·max(0, r - g'), g' a quarter of
    the rows on SMs - 16 (``slow`` = SMs / (SMs - 16)), r the userbuffers reduce-scatter of
    S/4 (`userbuffers_collective_time_s`); without the pipeline SM margin g' runs on every
    SM and each of the 3 overlapped chunks pays (``slow`` - 1)·min(r, g') while the
    reduce-scatter shares its SMs (`_pipeline_rs_s`)."""
    m2, n2, k2 = second
    if options.tp_overlap_rs_method == "ring_exchange":
        return gemms.ring(m2, n2, k2, size_bytes) + ring_reduce_time_s(
            gemms.profile, size_bytes, gemms.tp
        )
    splits = TP_OVERLAP_RS_SPLITS
    return _pipeline_rs_s(
        gemm_s=gemms.gemm(m2, n2, k2),
        chunk_s=gemms.gemm(m2 / splits, n2, k2),
        rs_chunk_s=userbuffers_collective_time_s(
            gemms.profile, "reduce_scatter", size_bytes / splits, gemms.group
        ),
        slow=slow,
        sm_margin=options.tp_overlap_pipeline_sm_margin,
    )


def _bulk_backward_s(
    gemms: OverlapGemms, first: Shape, size_bytes: float, options: ExecutionOptions, slow: float
) -> float:
    """Seconds the ``bulk`` overlaps add to the backward of the column-parallel GEMM
    ``first``: with the SM margin (f = ``slow`` = SMs / (SMs - 16)), (f - 1)·(D + W) +
    max(0, AG - f·D) + max(0, RS - f·W) for its dgrad D and wgrad W; without it,
    max(0, AG - D) + max(0, RS - W) + (f - 1)·(min(AG, D) + min(RS, W)); AG and RS the
    userbuffers all-gather of A and reduce-scatter of S (`userbuffers_collective_time_s`,
    `_bulk_s`)."""
    m1, n1, k1 = first
    profile, group = gemms.profile, gemms.group
    return _bulk_s(
        dgrad_s=gemms.gemm(m1, k1, n1),
        wgrad_s=gemms.gemm(k1, n1, m1),
        ag_s=userbuffers_collective_time_s(profile, "all_gather", gemms.gathered, group),
        rs_s=userbuffers_collective_time_s(profile, "reduce_scatter", size_bytes, group),
        slow=slow,
        sm_margin=options.tp_overlap_bulk_sm_margin,
    )


def ring_send_tail_s(
    profile: HardwareProfile,
    tp: int,
    dtype: str,
    gather_bytes: float,
    group: GroupPlacement,
    dgrad: Shape,
    queued_s: float,
) -> float:
    """Seconds by which ``queued_s`` of work queued on the send stream of a row-parallel
    ``ring_exchange`` dgrad (the GEMM ``dgrad``, each send A/tp of ``gather_bytes``) outlasts
    that GEMM: max(0, (tp - 1)·p + q - span), span = tp·g + (tp - 1)·max(0, p - g), the
    send stream busy with the tp - 1 ring sends p (each forwards the chunk received by the
    one before it), then free while the GEMM finishes its chunks g (`tp_overlap_pair_s`).

    The queued work is MXFP8's column-wise output gradient for the wgrad GEMM (TE
    ``_Linear.backward``, v2.5 to HEAD: "we can't convert row-scaled MXFP8 to column-scaled",
    so under ``torch.cuda.stream(dgrad_send_stream)`` it quantizes the 16-bit gradient
    column-wise, gathers its scales and its data (``fill_userbuffers_buffer_for_all_gather``,
    ``tex.bulk_overlap_ag_with_external_gemm``; v2.5 ``gather_along_first_dim`` on the same
    stream); ``bulk_overlap_external_ag`` makes the main stream wait for it before the wgrad
    GEMM)."""
    if tp < 2 or queued_s <= 0:
        return 0.0
    m, n, k = dgrad
    chunk = ops.gemm_time_s(profile, _rows(m / tp), _rows(n), _rows(k), dtype)
    send = userbuffers_step_time_s(profile, gather_bytes / tp, group)
    span = tp * chunk + (tp - 1) * max(0.0, send - chunk)
    return max(0.0, (tp - 1) * send + queued_s - span)


def _pipeline_rs_s(
    *, gemm_s: float, chunk_s: float, rs_chunk_s: float, slow: float, sm_margin: bool
) -> float:
    """What the ``pipeline`` reduce-scatter overlap adds to a row-parallel forward GEMM of
    ``gemm_s`` split into `TP_OVERLAP_RS_SPLITS` chunks of ``chunk_s`` on every SM
    (`tp_overlap_pair_s`)."""
    splits = TP_OVERLAP_RS_SPLITS
    chunk = slow * chunk_s if sm_margin else chunk_s
    shared = 0.0 if sm_margin else (splits - 1) * (slow - 1) * min(rs_chunk_s, chunk_s)
    exposed = (splits - 1) * max(0.0, rs_chunk_s - chunk)
    return splits * chunk - gemm_s + rs_chunk_s + exposed + shared


def _bulk_s(
    *, dgrad_s: float, wgrad_s: float, ag_s: float, rs_s: float, slow: float, sm_margin: bool
) -> float:
    """What the ``bulk`` overlaps add to a backward (`tp_overlap_pair_s`)."""
    if sm_margin:
        hidden = max(0.0, ag_s - slow * dgrad_s) + max(0.0, rs_s - slow * wgrad_s)
        return (slow - 1) * (dgrad_s + wgrad_s) + hidden
    shared = (slow - 1) * (min(ag_s, dgrad_s) + min(rs_s, wgrad_s))
    return max(0.0, ag_s - dgrad_s) + max(0.0, rs_s - wgrad_s) + shared


def _rows(value: float) -> int:
    return max(math.ceil(value), 1)
