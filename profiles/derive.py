"""Derive the stored profiles (`profiles/data/*.json`) from published figures.

Every figure below is transcribed from `reference/hardware.yaml` / `hardware.md` with its
[Sx] source key; everything else is arithmetic on them, done here so it can be re-run and
checked: `python -m profiles.derive --write` rewrites the files, `python -m profiles.derive`
exits 1 if a stored file differs from the derivation.

Derivation rules (also recorded in each profile's provenance notes):
- GEMM efficiency: Calculon's A100 fp16 `gflops_efficiency` table [S48] (0.6 at 1 GFLOP,
  0.9 at 16, 0.95 at 128) with its GFLOP axis scaled by peak / 312 TFLOP/s (a GEMM of the
  same ideal duration sees the same fraction) and its efficiency axis by top / 0.95, so
  large GEMMs reach the top fraction: the sustained rate of a large GEMM on random data
  where one is sourced (training runs for hours at the power limit, and random operands
  draw more switching power than the benchmark's fastest burst: A100 257 TFLOP/s [S55]),
  else the measured MAMF fraction [S1] (the fastest of 100 iterations, a burst figure).
- Misaligned GEMMs: 272.7 / 398.4 TFLOP/s for d_ff 10922 vs 10944 on H100 [S24]; 10848
  (a multiple of 32) ran at full speed, so the granule is 32 elements.
- Memory-bound bandwidth: 0.90 of HBM peak, Calculon's HBM efficiency at >= 100 MB [S48].
- Attention: FlashAttention-3 on H100 [S26][S27][S28], FlashAttention-2 on A100 [S25],
  cuDNN fused attention measured on GB200 and GB300 for the Blackwell profiles [S57][S58]
  (`profiles.derive_cudnn`), in bf16 and in FP8 (``fp8``, ``mxfp8``); H100 and H200 carry
  an ``fp8`` curve from the fp8/bf16 ratio of a cuDNN run on H200 [S61].
- Collectives: α-β fits per (op, group size, placement); the latency models of
  `profiles.derive_rules` give α, each device's figures β. Where a source traced a
  collective over a range of sizes (A100 all_reduce on 2, 4 and 8 GPUs [S39]), those
  times ride on the fit as measured points that the lookup scales the line to. Intra-domain
  all_to_all takes a published nccl-tests ``alltoall_perf`` figure where one exists
  (`profiles.derive_alltoall`: runs [S62], NVIDIA's chart [S63]); so does the NIC rate of
  an all_to_all across DGX A100 and H100 servers (the chart's 32-GPU bars [S63]).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from profiles.derive_alltoall import (
    A100_ALLTOALL_CHART,
    A100_ALLTOALL_NET_BAR,
    H100_ALLTOALL_CHART,
    H100_ALLTOALL_NET_BAR,
    alltoall_chart_note,
    alltoall_net_note,
    with_alltoall,
)
from profiles.derive_blackwell import (
    B200,
    B200_LATENCY8_US,
    B300,
    GB200_NVL72,
    GB300_NVL72,
)
from profiles.derive_collectives import (
    COLLECTIVES,
    H100_NVLS_GBPS,
    H100_RING_GBPS,
    INTRA_SIZES,
    log2_interpolated,
    switch_busbw,
)
from profiles.derive_cudnn import (
    HOPPER_FP8_NOTE,
    hopper_fp8_curves,
)
from profiles.derive_export import a800_sxm_80gb, h800_sxm_80gb
from profiles.derive_rules import (
    COMMAND,
    DATA_DIR,
    Figures,
    a100_fa2_curves,
    build_profile,
    h100_fa3_curves,
    scaled_from_h100,
)
from profiles.schema import HardwareProfile
from profiles.schema_network import TimePoint
from specs import serde

# --- device figures -----------------------------------------------------------------------

_A100_VTRAIN_TO_16GIB = 234.89 / 229.35  # 8-GPU busbw: nccl-tests 16 GiB [S6] / vTrain 1 GiB [S39]
_A100_RING = log2_interpolated(
    {
        2: 197.3 * _A100_VTRAIN_TO_16GIB,  # vTrain AR_GPU2 LUT, 1 GiB [S39]
        4: 221.9 * _A100_VTRAIN_TO_16GIB,  # vTrain AR_GPU4 LUT, 1 GiB [S39]
        8: 234.89,  # 8xA100 nccl-tests all_reduce, 16 GiB [S6]
    },
    INTRA_SIZES,
)

_A100_TRACE_MIB = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 1024)
"""Sizes (MiB, nccl-tests convention) of `_A100_ALL_REDUCE_TRACE_NS`: powers of two and
the 1.5x steps between them, where NCCL's protocol choice makes the trace non-monotone."""
# fmt: off
_A100_ALL_REDUCE_TRACE_NS = {
    2: (44210, 53430, 61180, 86900, 109100, 131900, 176500, 230000, 313000, 404700, 572000,
        763600, 1104700, 1455800, 5442800),
    4: (51400, 55740, 77320, 116800, 139200, 179600, 220200, 284200, 396400, 543800, 762700,
        998600, 1442300, 1929000, 7259400),
    8: (92790, 93250, 95800, 134300, 175700, 232400, 265300, 358100, 439400, 579900, 828500,
        1162000, 1610200, 2162300, 8193000),
}
# fmt: on
"""A100 NVSwitch all_reduce times (ns) measured by NCCL traces at `_A100_TRACE_MIB`:
vTrain ``trace/a100/AR_GPU{n}_1M_1024M_LUT``, first time column [S39]. The α-β line runs
4-12% below them at the 24-192 MiB of tensor-parallel layers and up to 1.8x at 1 MiB."""


def _a100_all_reduce_points() -> dict[tuple[str, int], tuple[TimePoint, ...]]:
    return {
        ("all_reduce", n): tuple(
            TimePoint(size_bytes=float(size * 2**20), seconds=ns * 1e-9)
            for size, ns in zip(_A100_TRACE_MIB, times, strict=True)
        )
        for n, times in _A100_ALL_REDUCE_TRACE_NS.items()
    }


A100_SXM_80GB = Figures(
    name="a100-sxm-80gb",
    generation="ampere",
    device_name="NVIDIA A100 SXM4 80GB",
    vendor="NVIDIA",
    backend="nccl",
    peak_tflops={"bf16": 312.0, "fp16": 312.0, "fp32": 19.5},  # [S1][S2]; no fp8 on Ampere
    mamf_tflops={"bf16": 271.2},  # MAMF 1024x10240x5120, torch 2.6.0 [S1]
    sustained_tflops={"bf16": 257.0},  # 8192^3 on torch.randn inputs, power-limited [S55]
    memory_gb=80.0,  # HBM2e [S2]
    nvml_memory_mib=81_920.0,  # NVML total [S60]
    hbm_tbps=2.039,  # [S2]
    fabric="nvswitch",  # DGX/HGX A100, 6 NVSwitch gen2 [S6][S15]
    scale_up_GBps=300.0,  # NVLink3, 12 links, per direction [S6]
    nic_Gbps_per_gpu=200.0,  # DGX A100: 8x 200 Gb/s HDR [S21][S15]
    nic_achieved_GBps=192.0 / 8,  # DGX A100 inter-node all_reduce busbw 192 GB/s [S21]
    nic_alltoall_GBps=A100_ALLTOALL_NET_BAR.nic_GBps,  # 32-GPU DGX A100 alltoall bar [S63]
    intra_busbw=with_alltoall(
        {op: {n: (round(bw, 2), "ring") for n, bw in _A100_RING.items()} for op in COLLECTIVES},
        A100_ALLTOALL_CHART,  # all_to_all: NVIDIA's 8-GPU NVLink3 alltoall bar [S63]
    ),
    intra_points=_a100_all_reduce_points(),
    p2p_GBps=274.0,  # p2pBandwidthLatencyTest, NVLink3 [S6]
    latency8_us=43.83,  # 8xA100 nccl-tests all_reduce at 32 KiB [S6]
    attention=a100_fa2_curves(),
    attention_kernel="FlashAttention-2",
    sources=("S2", "S6", "S15", "S21", "S25", "S30", "S38", "S39", "S60", "S63"),
    notes=(
        "Intra busbw: vTrain all_reduce LUT at 1 GiB for 2/4 GPUs [S39] scaled by "
        "234.89/229.35 to the 16 GiB nccl-tests figure [S6]; 3 and 5-7 GPUs interpolated in "
        "log2(n). all_gather and reduce_scatter have no A100 source and use the ring "
        "all_reduce busbw (on H100 they are within 6% of it [S30][S38]).",
        alltoall_chart_note("8x A100, NVLink3 and NVSwitch", A100_ALLTOALL_CHART),
        "Intra all_reduce on 2, 4 and 8 GPUs carries vTrain's traced times at 1 MiB-1 GiB "
        "[S39] as measured points: 4-12% above the α-β line at 24-192 MiB, up to 1.8x at "
        "1 MiB; beyond 1 GiB the 1 GiB ratio (1.02) holds. all_gather and reduce_scatter "
        "have no A100 trace and keep the line.",
        "Inter busbw: DGX A100 all_reduce busbw 192 GB/s over 8x 200 Gb/s HDR [S21], 24 GB/s "
        "per GPU.",
        alltoall_net_note("DGX A100, 8x 200 Gb/s", A100_ALLTOALL_NET_BAR),
        "Attention: FA2 reaches 50-73% of peak over seq 512-16k [S25]; no per-pass or "
        "per-head-dim table was found, so one curve (head_dim 128) serves both passes.",
    ),
)

A100_SXM_40GB = dataclasses.replace(
    A100_SXM_80GB,
    name="a100-sxm-40gb",
    device_name="NVIDIA A100 SXM4 40GB",
    memory_gb=40.0,  # HBM2 [S2][S3]
    nvml_memory_mib=40_960.0,  # NVML total [S60]
    hbm_tbps=1.555,  # [S2][S3]
    sources=(*A100_SXM_80GB.sources, "S3"),
    notes=(
        "The 80 GB part's figures except the memory: the same peaks [S1][S2], NVLink3 and "
        "NVSwitch [S6], DGX A100 NICs [S21]; its MAMF and collective sources do not name the "
        "memory variant, and none is memory-bound.",
        *A100_SXM_80GB.notes,
    ),
)
"""The A100 SXM4 40GB (HBM2, 40 GB, 1.555 TB/s [S2][S3]): the A100 80 GB figures with its
memory size and bandwidth."""

# 8-GPU small-message all_reduce times derived from torch-level busbw at 32 KiB [S6]:
# t = 32768 B * 1.75 / busbw (factor 2(n-1)/n for n = 8).
_H200_LATENCY8_US = round(32768 * 1.75 / 1.44e9 * 1e6, 2)  # busbw 1.44 GB/s [S6]

H100_SXM_80GB = Figures(
    name="h100-sxm-80gb",
    generation="hopper",
    device_name="NVIDIA H100 SXM5 80GB",
    vendor="NVIDIA",
    backend="nccl",
    # dense = sparse / 2 [S4]; exact values [S5]
    peak_tflops={"bf16": 989.4, "fp16": 989.4, "fp8": 1978.9, "fp32": 66.9},
    mamf_tflops={"bf16": 794.5, "fp8": 1402.6},  # MAMF, torch 2.7.0+cu126 [S1]
    memory_gb=80.0,  # HBM3 [S4]
    nvml_memory_mib=81_559.0,  # NVML total [S60]
    hbm_tbps=3.35,  # [S4]
    fabric="nvswitch",  # DGX H100, 4 NVSwitch gen3 [S6][S16]
    scale_up_GBps=450.0,  # NVLink4, 18 links, per direction [S6]
    nic_Gbps_per_gpu=400.0,  # DGX H100: 8x ConnectX-7 400G [S16]
    nic_achieved_GBps=48.0,  # CX-7 NDR through NCCL, 46-49 GB/s [S33][S37][S43]
    nic_alltoall_GBps=H100_ALLTOALL_NET_BAR.nic_GBps,  # 32-GPU DGX H100 alltoall bar [S63]
    intra_busbw=switch_busbw(
        ring=H100_RING_GBPS,  # any collective with RING, 2-8 GPUs [S30][S36]
        nvls8=H100_NVLS_GBPS[8],  # NVLS all_reduce, 8 GPUs [S30][S37]
        ag=350.0,  # all_gather busbw [S38]
        rs=360.0,  # reduce_scatter busbw [S38]
        a2a=H100_ALLTOALL_CHART[0].busbw_GBps,  # 8-GPU NVLink4 alltoall bar [S63]
    ),
    p2p_GBps=376.0,  # p2pBandwidthLatencyTest, NVLink4 [S6]
    latency8_us=_H200_LATENCY8_US,
    attention=(*h100_fa3_curves(1.0), *hopper_fp8_curves()),
    attention_kernel="FlashAttention-3",
    sources=(
        "S4",
        "S5",
        "S6",
        "S16",
        "S26",
        "S27",
        "S30",
        "S33",
        "S36",
        "S37",
        "S38",
        "S43",
        "S60",
        "S61",
        "S63",
    ),
    notes=(
        "Intra alpha: no H100 small-message figure; H200's 32 KiB torch all_reduce "
        f"({_H200_LATENCY8_US} us [S6]) is used (same NVLink4 and NVSwitch).",
        alltoall_chart_note("8x H100, NVLink4 and NVSwitch", H100_ALLTOALL_CHART),
        alltoall_net_note("DGX H100, 8x 400 Gb/s", H100_ALLTOALL_NET_BAR),
        "Attention: FA3 FP16 charts on H100 SXM5 [S27] (causal-consistent forward set), bf16 "
        "assumed equal; curve shape between 512 and 16k from the FA3 re-run [S28]. FA3's own "
        "fp8 forward ('close to 1.2 PFLOP/s' [S26]) is not what Transformer Engine trains "
        "with and has no seq-len curve.",
        HOPPER_FP8_NOTE,
    ),
)

H200_SXM_141GB = Figures(
    name="h200-sxm-141gb",
    generation="hopper",
    device_name="NVIDIA H200 SXM 141GB",
    vendor="NVIDIA",
    backend="nccl",
    peak_tflops={"bf16": 989.0, "fp16": 989.0, "fp8": 1979.0, "fp32": 67.0},  # [S1][S7]
    mamf_tflops={"bf16": 794.5, "fp8": 1453.4},  # bf16 "H200 is the same" as H100; fp8 [S1]
    memory_gb=141.0,  # HBM3e [S1][S7]
    nvml_memory_mib=143_771.0,  # NVML total [S60]
    hbm_tbps=4.8,  # [S1][S7]
    fabric="nvswitch",  # DGX/HGX H200, 4 NVSwitch [S16]
    scale_up_GBps=450.0,  # [S6][S7]
    nic_Gbps_per_gpu=400.0,  # 8x ConnectX-7 as DGX H100 [S16]
    nic_achieved_GBps=48.0,  # CX-7 NDR through NCCL [S33][S43]
    nic_alltoall_GBps=H100_ALLTOALL_NET_BAR.nic_GBps,  # DGX H100's bar: same NICs [S16][S63]
    intra_busbw=switch_busbw(
        ring=367.61,  # 8 GPUs, 16 GiB, NCCL_NVLS_ENABLE=0 [S6]
        nvls8=482.26,  # 8 GPUs, 16 GiB, NVLS [S6]
        ag=350.0,  # H100 [S38]
        rs=360.0,  # H100 [S38]
        a2a=H100_ALLTOALL_CHART[0].busbw_GBps,  # H100's NVLink4 alltoall bar [S63]
    ),
    p2p_GBps=376.0,  # H100 NVLink4 p2p [S6]
    latency8_us=_H200_LATENCY8_US,
    attention=(*h100_fa3_curves(1.0), *hopper_fp8_curves()),
    attention_kernel="FlashAttention-3",
    sources=(
        "S6",
        "S7",
        "S16",
        "S26",
        "S27",
        "S30",
        "S33",
        "S37",
        "S38",
        "S43",
        "S60",
        "S61",
        "S63",
    ),
    notes=(
        "all_gather, reduce_scatter and send_recv busbw from H100 [S38][S6] (same NVLink4 "
        "and NVSwitch); NVLS all_reduce for 5-7 GPUs follows H100's rise [S37].",
        alltoall_chart_note(
            "8x H100 (same NVLink4 and NVSwitch; no H200 bar)", H100_ALLTOALL_CHART
        ),
        alltoall_net_note(
            "DGX H100, 8x 400 Gb/s (DGX H200 has the same 8x ConnectX-7 [S16]; no H200 bar)",
            H100_ALLTOALL_NET_BAR,
        ),
        "Attention: H100 FA3 figures [S27][S28] (same compute; H200 differs in memory).",
        HOPPER_FP8_NOTE,
    ),
)

H800_SXM_80GB = h800_sxm_80gb(H100_SXM_80GB)
"""The H800 SXM: H100 SXM5 figures with NVLink cut to 8 of 18 links (`profiles.derive_export`)."""

A800_SXM_80GB = a800_sxm_80gb(A100_SXM_80GB)
"""The A800 SXM4 80GB: A100 80GB figures with NVLink cut to 8 of 12 links."""


_MI300X_LINK_GBPS = 64.0  # one xGMI link per peer, per direction [S6]
_MI300X_EFF = log2_interpolated(
    {2: 47.7 / _MI300X_LINK_GBPS, 8: 312.9 / (7 * _MI300X_LINK_GBPS)},  # RCCL, 4 GiB [S6]
    INTRA_SIZES,
)
# A group of n GPUs in the fully connected mesh drives n-1 peer links per GPU.
_MI300X_BUSBW = {n: round((n - 1) * _MI300X_LINK_GBPS * eff, 2) for n, eff in _MI300X_EFF.items()}

MI300X = Figures(
    name="mi300x",
    generation="cdna3",
    device_name="AMD Instinct MI300X",
    vendor="AMD",
    backend="rccl",
    peak_tflops={"bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9, "fp32": 163.4},  # [S1]
    mamf_tflops={"bf16": 668.4},  # MAMF, ROCm 6.3, TunableOp on [S1]
    memory_gb=192.0,  # HBM3 [S1][S14]
    hbm_tbps=5.3,  # [S1][S14]
    fabric="xgmi_mesh",  # fully connected 8-GPU xGMI mesh, no switch [S6][S14]
    scale_up_GBps=448.0,  # 7 links x 64 GB/s per direction [S6]
    peer_GBps=_MI300X_LINK_GBPS,
    nic_Gbps_per_gpu=400.0,  # "400 Gb/s Ethernet or InfiniBand NDR" (secondary) [S14]
    nic_achieved_GBps=48.0,  # assumed as an NDR CX-7 through NCCL [S33]
    intra_busbw={
        op: {n: (bw, "direct" if op == "all_to_all" else "ring") for n, bw in _MI300X_BUSBW.items()}
        for op in COLLECTIVES
    },
    p2p_GBps=47.7,  # 2-GPU RCCL all_reduce over the single peer link [S6]
    latency8_us=B200_LATENCY8_US,
    attention=scaled_from_h100(668.4),
    attention_kernel="FlashAttention-3 figures scaled to MI300X (no MI300X source)",
    sources=("S6", "S14", "S26", "S27", "S33"),
    notes=(
        "Intra busbw: n-1 peer links of 64 GB/s [S6] at an efficiency interpolated in log2(n) "
        "between the 2-GPU (47.7/64) and 8-GPU (312.9/448) RCCL all_reduce runs [S6]; every "
        "collective uses it (no per-op source).",
        "Intra alpha: no MI300X small-message figure; the largest sourced 8-GPU figure "
        f"(B200, {B200_LATENCY8_US} us [S6]) stands in, with NCCL's NVLink hop for growth.",
        "Scale-out NIC from a secondary source [S14]; achieved rate assumed 48 GB/s as CX-7.",
        "GEMM: MAMF needs ROCm 6.2+ (about 450 TFLOP/s with ROCm 6.1 [S1]). fp8 reuses the "
        "bf16 fraction. Misalignment factor borrowed from H100 [S24].",
        "Attention: no MI300X figure; H100 FA3 curves scaled by the MAMF ratio 668.4/794.5.",
    ),
)

ALL_FIGURES: tuple[Figures, ...] = (
    A100_SXM_80GB,
    A100_SXM_40GB,
    A800_SXM_80GB,
    H100_SXM_80GB,
    H200_SXM_141GB,
    H800_SXM_80GB,
    B200,
    MI300X,
    GB200_NVL72,
    GB300_NVL72,
    B300,
)


def derived_profiles() -> dict[str, HardwareProfile]:
    """Every stored profile, by name, as derived from the figures above."""
    return {fig.name: build_profile(fig) for fig in ALL_FIGURES}


def main(argv: list[str] | None = None) -> int:
    """Compare (default) or rewrite (`--write`) the stored JSON files; 1 if any differ."""
    parser = argparse.ArgumentParser(prog="python -m profiles.derive", description=__doc__)
    parser.add_argument("--write", action="store_true", help="rewrite the stored JSON files")
    parser.add_argument("--out", type=Path, default=DATA_DIR, help="folder of the JSON files")
    args = parser.parse_args(argv)
    stale = []
    for name, profile in derived_profiles().items():
        path = args.out / f"{name}.json"
        text = serde.dumps(profile)
        if args.write:
            args.out.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path}")
        elif not path.exists() or path.read_text() != text:
            stale.append(name)
            print(f"{path}: differs from the derivation; run {COMMAND}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
