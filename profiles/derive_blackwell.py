"""Figures of the Blackwell profiles: `b200`, `gb200-nvl72`, `gb300-nvl72` and `b300`.

Transcribed with their [Sx] keys (`profiles.derive_rules.SOURCES`); `profiles.derive`
turns them into the stored files. NVL72 racks put 72 GPUs in one NVLink domain built
from 18 compute trays of 4 GPUs each [S18][S19], so their profiles carry
``gpus_per_node=4`` and ``scale_up_domain=72`` and store intra-domain collective fits up
to 72 ranks.
"""

from __future__ import annotations

from profiles.derive_alltoall import (
    B200_ALLTOALL_RUNS,
    B200_ALLTOALL_SWEEP,
    B300_ALLTOALL_RUNS,
    GB200_ALLTOALL_RUNS,
    GB300_ALLTOALL_RUNS,
    AlltoallRun,
    alltoall_note,
    alltoall_points,
    alltoall_sweep_note,
    with_alltoall,
)
from profiles.derive_collectives import (
    COLLECTIVES,
    NVL72_INTRA_SIZES,
    BusbwTable,
    log2_interpolated,
    switch_busbw,
)
from profiles.derive_cudnn import (
    CUDNN_KERNEL,
    CUDNN_NOTES,
    cudnn_curves,
    sibling_note,
    sibling_scale,
)
from profiles.derive_rules import Figures

# 8-GPU small-message all_reduce time from the torch-level busbw at 32 KiB on 8xB200 [S6]:
# t = 32768 B * 1.75 / busbw (factor 2(n-1)/n for n = 8).
B200_LATENCY8_US = round(32768 * 1.75 / 1.20e9 * 1e6, 2)  # busbw 1.20 GB/s [S6]

NVLINK5_RING_GBPS = round(40.1 * 18, 2)  # NCCL sm100 per-link model x 18 links [S35]
B200_NVLS8_GBPS = 845.67  # 8xB200 all_reduce, 16 GiB [S6]
NVL72_RING72_GBPS = 680.0  # NVL72 all_reduce without NVLink SHARP (GTC25 slide via [S6])
NVL72_NVLS72_GBPS = 850.0  # NVL72 all_reduce with NVLink SHARP (GTC25 slide via [S6])
CX7_ACHIEVED_GBPS = 48.0  # ConnectX-7 NDR 400G through NCCL [S33][S43]
CX7_LINE_GBPS = 50.0  # 400 Gb/s
CX8_LINE_GBPS = 100.0  # 800 Gb/s ConnectX-8 [S6]
CX8_ACHIEVED_GBPS = round(CX8_LINE_GBPS * CX7_ACHIEVED_GBPS / CX7_LINE_GBPS, 2)
"""No measured ConnectX-8 figure: the CX-7 share of line rate (48/50) applied to 800 Gb/s."""


def nvl72_busbw(alltoall_runs: tuple[AlltoallRun, ...]) -> BusbwTable:
    """Busbw per op and group size inside a 72-GPU NVLink domain.

    2-8 GPUs: the NVLink5 switch table of B200 (`switch_busbw`). Beyond 8 the rates are
    interpolated in log2(n) towards the 72-GPU all_reduce figures (ring 680, NVLS 850 GB/s
    [S6]); all_gather and reduce_scatter follow the ring figure. all_to_all: the rack's
    measured ``alltoall_runs`` (`profiles.derive_alltoall.with_alltoall`).
    """
    base = switch_busbw(
        ring=NVLINK5_RING_GBPS,
        nvls8=B200_NVLS8_GBPS,
        ag=NVLINK5_RING_GBPS,
        rs=NVLINK5_RING_GBPS,
        a2a=NVLINK5_RING_GBPS,
    )
    ring = log2_interpolated({8: NVLINK5_RING_GBPS, 72: NVL72_RING72_GBPS}, NVL72_INTRA_SIZES)
    nvls = log2_interpolated({8: B200_NVLS8_GBPS, 72: NVL72_NVLS72_GBPS}, NVL72_INTRA_SIZES)
    for n in NVL72_INTRA_SIZES:
        if n <= 8:
            continue
        for op in COLLECTIVES:
            if op == "all_reduce":
                base[op][n] = (round(nvls[n], 2), "nvls")
            else:
                base[op][n] = (round(ring[n], 2), "direct" if op == "all_to_all" else "ring")
    return with_alltoall(base, alltoall_runs)


_CX8_NOTE = (
    f"Inter busbw: no ConnectX-8 measurement; the CX-7 share of line rate (48 of 50 GB/s "
    f"[S33][S43]) applied to 800 Gb/s gives {CX8_ACHIEVED_GBPS} GB/s per GPU."
)

_BLACKWELL_ULTRA_NOTE = (
    "Generation blackwell_ultra, not blackwell: Blackwell Ultra is its own chip "
    "(compute capability sm_103 vs sm_100 for B200/GB200: Transformer Engine "
    "transformer_engine/common/CMakeLists.txt builds 103a beside 100a; per-GPU TDP, "
    "SFU exponential rate differ [S9]). Its published training rate is not explained "
    "by any microbenchmark in these sources, so the peaks stay and the cost model's "
    "fitted factors take their own blackwell_ultra values."
)

_NVL72_NOTES = (
    "NVL72: 18 compute trays x 4 GPUs in one NVLink domain through 9 NVSwitch trays "
    "[S18][S19]; gpus_per_node is the tray (4), scale_up_domain 72, one NIC per GPU.",
    "Intra busbw 2-8 GPUs: B200's NVLink5 table (NCCL sm100 ring model 40.1 GB/s x 18 "
    "links [S35], 8-GPU all_reduce 845.67 GB/s [S6]); 16-72 GPUs interpolated in log2(n) "
    "to the 72-GPU all_reduce busbw, 680 GB/s ring and 850 GB/s NVLink SHARP (GTC25 slide "
    "via [S6]); all_gather and reduce_scatter follow the ring figure.",
    "Intra alpha: B200's 8-GPU small all_reduce [S6] grown with NCCL's ring LL model [S35] "
    "(no NVL72 small-message figure).",
    "send_recv: GB200 NVL4 p2pBandwidthLatencyTest, 746 GB/s [S6].",
)

GB200_BF16_MAMF = 1822.0
"""GB200's bf16 MAMF, TFLOP/s (torch 2.10 dev +cu130) [S1]; GB300 has no figure and uses it."""

B300_BF16_MAMF = 1769.0
"""B300's bf16 MAMF, TFLOP/s (torch 2.9.1+cu130) [S1]."""


GB200_NVL72 = Figures(
    name="gb200-nvl72",
    generation="blackwell",
    device_name="NVIDIA GB200 NVL72 (per Blackwell GPU)",
    vendor="NVIDIA",
    backend="nccl",
    peak_tflops={
        "bf16": 2500.0,
        "fp16": 2500.0,
        "fp8": 5000.0,
        "fp4": 10000.0,  # dense FP4 [S8]
        "fp32": 80.0,
    },  # [S1][S8]
    mamf_tflops={"bf16": GB200_BF16_MAMF, "fp8": 3615.6},  # MAMF, torch 2.10 dev +cu130 [S1]
    memory_gb=186.0,  # NVIDIA MIG table via [S1]; 192 in early announcements [S8]
    hbm_tbps=8.0,  # [S1]
    fabric="nvswitch",  # NVLink switch trays [S18]
    scale_up_GBps=900.0,  # NVLink5, 1.8 TB/s bidirectional per GPU [S18][S6]
    nic_Gbps_per_gpu=400.0,  # 4x ConnectX-7 400G per tray of 4 GPUs [S18]
    nic_achieved_GBps=CX7_ACHIEVED_GBPS,
    intra_busbw=nvl72_busbw(GB200_ALLTOALL_RUNS),  # all_to_all: GB200 NVL72 runs [S62]
    p2p_GBps=746.0,  # p2pBandwidthLatencyTest on a GB200 NVL4 tray [S6]
    latency8_us=B200_LATENCY8_US,
    attention=cudnn_curves("GB200"),
    attention_kernel=CUDNN_KERNEL,
    exp_per_s=5.0e12,  # SFU exponentials per second [S9]
    sources=("S6", "S8", "S18", "S19", "S27", "S33", "S43", "S57", "S58", "S62"),
    gpus_per_node=4,
    scale_up_domain=72,
    notes=(
        *_NVL72_NOTES,
        alltoall_note("GB200 NVL72", GB200_ALLTOALL_RUNS, "NCCL 2.27.3"),
        "Conflicts: memory 186 GB [S1] vs 192 GB [S8]; fp32 80 [S1] vs 90 TFLOP/s [S8]. "
        "The NVIDIA platform figures are used.",
        "Inter busbw: 48 GB/s per ConnectX-7 NDR as on H100 [S33][S43].",
        *CUDNN_NOTES,
    ),
)

GB300_NVL72 = Figures(
    name="gb300-nvl72",
    generation="blackwell_ultra",
    device_name="NVIDIA GB300 NVL72 (per Blackwell Ultra GPU)",
    vendor="NVIDIA",
    backend="nccl",
    peak_tflops={
        "bf16": 2500.0,
        "fp16": 2500.0,
        "fp8": 5000.0,
        "fp4": 15000.0,  # dense FP4 per GPU [S9]
        "fp32": 80.0,
    },  # [S1][S9]
    mamf_tflops={"bf16": GB200_BF16_MAMF, "fp8": 3615.6},  # GB200's MAMF [S1]: no GB300 figure
    memory_gb=279.0,  # per-GPU table [S9]; 288 GB HBM3e per B300 [S56]
    hbm_tbps=8.0,  # [S9][S56]
    fabric="nvswitch",  # 9 NVSwitch trays, 130 TB/s [S19]
    scale_up_GBps=900.0,  # NVLink5, 1.8 TB/s bidirectional [S9]
    nic_Gbps_per_gpu=800.0,  # 4x ConnectX-8 per tray of 4 GPUs [S19][S56]; CX-8 800 Gb/s [S6]
    nic_achieved_GBps=CX8_ACHIEVED_GBPS,
    intra_busbw=nvl72_busbw(GB300_ALLTOALL_RUNS),  # all_to_all: GB300 NVL72 runs [S62]
    p2p_GBps=746.0,  # GB200 NVL4 p2pBandwidthLatencyTest, same NVLink5 [S6]
    latency8_us=B200_LATENCY8_US,
    attention=cudnn_curves("GB300"),
    attention_kernel=CUDNN_KERNEL,
    exp_per_s=10.7e12,  # SFU exponentials per second [S9]
    sources=("S6", "S9", "S18", "S19", "S27", "S33", "S43", "S56", "S57", "S58", "S62"),
    gpus_per_node=4,
    scale_up_domain=72,
    notes=(
        *_NVL72_NOTES,
        alltoall_note("GB300 NVL72", GB300_ALLTOALL_RUNS, "NCCL 2.28.7"),
        "Memory: 279 GB per GPU [S9] (rack 20 TB / 72); 288 GB HBM3e per B300 [S56] is the "
        "physical figure. The smaller is used.",
        "GEMM top: no GB300 MAMF; GB300 has GB200's dense bf16/fp8 peaks [S1][S9], so "
        "GB200's MAMF (1822 / 3615.6 TFLOP/s [S1]) is used.",
        _CX8_NOTE,
        *CUDNN_NOTES,
        _BLACKWELL_ULTRA_NOTE,
    ),
)

B300 = Figures(
    name="b300",
    generation="blackwell_ultra",
    device_name="NVIDIA B300 (HGX/DGX B300)",
    vendor="NVIDIA",
    backend="nccl",
    peak_tflops={
        "bf16": 2250.0,
        "fp16": 2250.0,
        "fp8": 4500.0,
        "fp4": 13500.0,  # dense FP4: HGX B300 108 PF over 8 GPUs [S9]
        "fp32": 80.0,
    },  # [S1]
    mamf_tflops={"bf16": B300_BF16_MAMF, "fp8": 3353.3},  # MAMF, torch 2.9.1+cu130 [S1]
    memory_gb=288.0,  # HBM3e [S1][S56]; 270 GB per [S9]
    hbm_tbps=8.0,  # [S1][S56]
    fabric="nvswitch",  # HGX/DGX B300, NVLink5 switch, 14.4 TB/s per 8 GPUs [S1]
    scale_up_GBps=900.0,  # NVLink5 [S6]
    nic_Gbps_per_gpu=800.0,  # DGX B300: 8x ConnectX-8 at 800 Gb/s [S6]
    nic_achieved_GBps=CX8_ACHIEVED_GBPS,
    intra_busbw=with_alltoall(
        switch_busbw(
            ring=NVLINK5_RING_GBPS,
            nvls8=B200_NVLS8_GBPS,
            ag=NVLINK5_RING_GBPS,
            rs=NVLINK5_RING_GBPS,
            a2a=NVLINK5_RING_GBPS,  # replaced by the 8xB300 alltoall_perf run [S62]
        ),
        B300_ALLTOALL_RUNS,
    ),
    p2p_GBps=746.0,  # GB200 NVLink5 p2pBandwidthLatencyTest (same NVLink5) [S6]
    latency8_us=B200_LATENCY8_US,
    attention=cudnn_curves("GB300", scale=sibling_scale(B300_BF16_MAMF, GB200_BF16_MAMF)),
    attention_kernel=f"{CUDNN_KERNEL}; GB300's figures scaled to B300 (no B300 run)",
    exp_per_s=10.7e12,  # SFU exponentials per second [S9]
    sources=("S6", "S9", "S27", "S33", "S35", "S43", "S56", "S57", "S58", "S59", "S62"),
    notes=(
        "Conflicts: memory 288 GB [S1][S56] vs 270 GB [S9]; fp32 80 [S1] vs 75 TFLOP/s [S9]. "
        "The [S1] figures are used.",
        "Intra busbw: B200's NVLink5 table (NCCL sm100 ring model [S35], 8-GPU all_reduce "
        "845.67 GB/s [S6]); intra alpha B200's 8-GPU small all_reduce [S6].",
        alltoall_note("8x B300", B300_ALLTOALL_RUNS, "NCCL 2.28.9")
        + " 2-7 GPUs hold the 8-GPU figure.",
        _CX8_NOTE,
        *CUDNN_NOTES,
        sibling_note("B300", "GB300", B300_BF16_MAMF, GB200_BF16_MAMF),
        _BLACKWELL_ULTRA_NOTE,
    ),
)


B200_BF16_MAMF = 1745.0
"""B200's bf16 MAMF, TFLOP/s (torch 2.7.1+cu128) [S1]."""


B200 = Figures(
    name="b200",
    generation="blackwell",
    device_name="NVIDIA B200 (HGX/DGX B200)",
    vendor="NVIDIA",
    backend="nccl",
    peak_tflops={
        "bf16": 2250.0,
        "fp16": 2250.0,
        "fp8": 4500.0,
        "fp4": 9000.0,  # dense FP4 [S8]
        "fp32": 80.0,
    },  # [S1][S8]
    mamf_tflops={"bf16": B200_BF16_MAMF, "fp8": 3432.5},  # MAMF, torch 2.7.1+cu128 [S1]
    memory_gb=180.0,  # DGX B200 1,440 GB / 8 [S1][S17]
    hbm_tbps=8.0,  # DGX B200 64 TB/s / 8 [S1][S17]
    fabric="nvswitch",  # DGX B200, 2 NVSwitch chips [S17]
    scale_up_GBps=900.0,  # NVLink5, 18 links, per direction [S6][S17]
    nic_Gbps_per_gpu=400.0,  # DGX B200: 8x ConnectX-7 VPI [S16]
    nic_achieved_GBps=48.0,  # same CX-7 NIC as DGX H100 [S33][S43]
    intra_busbw=with_alltoall(
        switch_busbw(
            ring=NVLINK5_RING_GBPS,  # NCCL sm100 per-link model x 18 links [S35]
            nvls8=845.67,  # 8xB200 all_reduce, 16 GiB [S6]
            ag=NVLINK5_RING_GBPS,
            rs=NVLINK5_RING_GBPS,
            a2a=NVLINK5_RING_GBPS,  # replaced by the 8xB200 alltoall_perf sweep [S64]
        ),
        B200_ALLTOALL_RUNS,  # 8 GiB row of the 8xB200 sweep [S64]
    ),
    intra_points={("all_to_all", 8): alltoall_points(B200_ALLTOALL_SWEEP)},  # [S64]
    p2p_GBps=746.0,  # GB200 NVLink5 p2pBandwidthLatencyTest (same NVLink5) [S6]
    latency8_us=B200_LATENCY8_US,
    attention=cudnn_curves("GB200", scale=sibling_scale(B200_BF16_MAMF, GB200_BF16_MAMF)),
    attention_kernel=f"{CUDNN_KERNEL}; GB200's figures scaled to B200 (no B200 run)",
    exp_per_s=5.0e12,  # SFU exponentials per second [S9]
    sources=(
        "S6",
        "S8",
        "S16",
        "S17",
        "S23",
        "S27",
        "S30",
        "S33",
        "S37",
        "S43",
        "S57",
        "S58",
        "S59",
        "S62",
        "S64",
    ),
    notes=(
        "Conflicts: memory 180 GB [S1][S17] vs 192 GB [S8]; HBM 8.0 vs 7.7 TB/s; fp32 80 [S1] "
        "vs 75 TFLOP/s. The NVIDIA platform figures are used.",
        "Ring busbw: NCCL's sm100 model, 40.1 GB/s per link x 18 [S35] (no measured ring "
        "figure); all_reduce 8 GPUs 845.67 GB/s at 16 GiB [S6] treated as NVLS.",
        alltoall_sweep_note("8x B200 (Vultr HGX B200)", B200_ALLTOALL_SWEEP, "NCCL 2.28.9")
        + " The 8x B300 run on the same NVLink5 switch baseboard reads 675.55 GB/s at 8 GiB "
        "[S62], 1% above.",
        "Inter all_to_all: the NIC's ring rate. The same sweep's 2-node, 16-GPU runs [S64] "
        "read 42.41 and 69.17 GB/s busbw at 8 GiB in two passes, on a fabric whose "
        "inter-node send_recv reached 19.6 GB/s per pair, so they are not used.",
        "Inter busbw: 48 GB/s per CX-7 as on H100 [S33]; a 4-node EFA run reached only 36.95 "
        "GB/s per GPU [S6].",
        *CUDNN_NOTES,
        sibling_note("B200", "GB200", B200_BF16_MAMF, GB200_BF16_MAMF),
        "GEMM check against B200 cuBLAS timings [S23]: the curve gives 1275 vs 1006 TFLOP/s "
        "measured for 2048^3 and 1661 vs 1532 for 4096^3; the Calculon-based curve is "
        "optimistic for GEMMs shorter than about 50 us.",
    ),
)
