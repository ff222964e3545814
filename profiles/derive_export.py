"""Export variants of stored profiles (`profiles.derive`): the H800 SXM (an H100 SXM5 with
8 of its 18 NVLink4 links) and the A800 SXM4 80GB (an A100 SXM4 80GB with 8 of its 12
NVLink3 links). Same die, memory and NICs as the base part; only the scale-up link
bandwidth differs. Source keys are those of `profiles.derive_rules.SOURCES`.

Rule (`link_cut`): every bandwidth term of an intra-node collective on an NVSwitch node is
bounded by the GPU's NVLink bandwidth into the switches at the sizes its figure was measured
(ring, NVLS and all_to_all busbw, all_gather, reduce_scatter, send/recv: hundreds of MiB to
GiB, where HBM runs an order of magnitude faster than the links), so each is the base part's
measured figure times the link ratio. The α terms (small-message times: launch, NCCL
protocol and switch hops, none of them link-width bound), the NIC rates, compute, GEMM and
attention curves and HBM are the base part's.
"""

from __future__ import annotations

import dataclasses

from profiles.derive_collectives import BusbwTable
from profiles.derive_rules import Figures

H800_LINK_RATIO = 8 / 18
"""H800 / H100 SXM NVLink bandwidth: 400 / 900 GB/s bidirectional [S65] (8 of 18 NVLink4
links of 50 GB/s bidirectional each)."""
A800_LINK_RATIO = 8 / 12
"""A800 / A100 SXM4 NVLink bandwidth: 400 / 600 GB/s bidirectional [S67] (8 of 12 NVLink3
links of 50 GB/s bidirectional each)."""

DEEPSEEK_H800_NVLINK_GBPS = 160.0
"""NVLink bandwidth DeepSeek-V3's all-to-all kernels achieved per H800 in their cluster,
GB/s [S66] §3.2.2 ("NVLink offers a bandwidth of 160 GB/s, roughly 3.2 times that of IB
(50 GB/s)"); a check on the scaled busbw, not an input."""
DEEPSEEK_H800_IB_GBPS = 50.0
"""IB bandwidth per H800 in the same cluster, GB/s [S66] §3.2.2: one 400 Gb/s NIC per GPU."""


def _scaled_busbw(table: BusbwTable, ratio: float) -> BusbwTable:
    return {
        op: {n: (round(bw * ratio, 2), algorithm) for n, (bw, algorithm) in row.items()}
        for op, row in table.items()
    }


def link_cut(
    base: Figures,
    *,
    name: str,
    device_name: str,
    ratio: float,
    sources: tuple[str, ...],
    notes: tuple[str, ...],
) -> Figures:
    """``base`` with its scale-up link bandwidth times ``ratio`` (module rule): the per-GPU
    NVLink rate, every intra busbw and the send/recv rate. Traced intra times are dropped:
    their measured-to-line ratio (`profiles.lookup.collective_time_s`) mixes latency and
    link terms that the cut changes unequally, so the scaled line stands alone; the rest
    is unchanged."""
    return dataclasses.replace(
        base,
        name=name,
        device_name=device_name,
        scale_up_GBps=round(base.scale_up_GBps * ratio, 2),
        intra_busbw=_scaled_busbw(base.intra_busbw, ratio),
        intra_points={},
        p2p_GBps=round(base.p2p_GBps * ratio, 2),
        sources=(*base.sources, *sources),
        notes=(*notes, *base.notes),
    )


def h800_sxm_80gb(h100: Figures) -> Figures:
    """The H800 SXM from the H100 SXM5 figures: same GH100 die, 80 GB HBM3 at 3.35 TB/s
    [S65], dense peaks fp16 989 / fp8 1979 TFLOP/s [S50]; NVLink 400 of 900 GB/s [S65];
    one 400 Gb/s IB NIC per GPU in DeepSeek's H800 servers [S66]."""
    scaled = h100.intra_busbw["all_reduce"][8][0] * H800_LINK_RATIO
    return link_cut(
        h100,
        name="h800-sxm-80gb",
        device_name="NVIDIA H800 SXM5 80GB",
        ratio=H800_LINK_RATIO,
        sources=("S50", "S65", "S66"),
        notes=(
            "H800: the H100 SXM5 profile with NVLink at 400 of 900 GB/s bidirectional [S65] "
            "(8 of 18 links): scale-up rate, every intra busbw (ring, NVLS, all_gather, "
            "reduce_scatter, all_to_all) and send/recv times 8/18, each being link-bound at "
            "the sizes measured on H100; α, NICs, compute, GEMM and attention curves and "
            "HBM are H100's (same die and memory [S65]; peaks as vidur's H800 SKU [S50]).",
            f"Check: scaled 8-GPU ring all_reduce busbw {scaled:.1f} GB/s against the "
            f"{DEEPSEEK_H800_NVLINK_GBPS:g} GB/s NVLink DeepSeek-V3 achieved per H800 [S66]; "
            f"IB {DEEPSEEK_H800_IB_GBPS:g} GB/s per GPU there is H100's 400 Gb/s CX-7 line "
            "rate [S66][S16].",
            "memory_gib: H100 SXM5's NVML total (same 80 GB HBM3 [S65]; no H800 NVML figure).",
        ),
    )


def a800_sxm_80gb(a100: Figures) -> Figures:
    """The A800 SXM4 80GB from the A100 SXM4 80GB figures: NVLink 400 of 600 GB/s, the
    only change named by the reports [S67]."""
    return link_cut(
        a100,
        name="a800-sxm-80gb",
        device_name="NVIDIA A800 SXM4 80GB",
        ratio=A800_LINK_RATIO,
        sources=("S67",),
        notes=(
            "A800: the A100 SXM4 80GB profile with NVLink at 400 of 600 GB/s bidirectional "
            "[S67] (8 of 12 links): scale-up rate, every intra busbw and send/recv times 8/12; "
            "vTrain's A100 all_reduce traces [S39] are not carried (the α-β line alone); α, "
            "NICs, compute, GEMM and attention curves and HBM are A100 80GB's.",
            "memory_gib and the NICs: A100 80GB's NVML total and DGX A100's 8x 200 Gb/s; no "
            "A800 NVML figure or A800 server NIC is sourced.",
        ),
    )
