"""Rules shared by every stored profile's derivation (`profiles.derive`): the sources, the
GEMM, attention and collective models, and `build_profile`, which turns one device's
transcribed `Figures` into a `HardwareProfile`. See `profiles.derive` for the rules' prose.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from profiles.derive_collectives import BusbwTable, collective_fits
from profiles.schema import HardwareProfile
from profiles.schema_device import (
    AttentionCurve,
    AttentionPoint,
    ComputeProfile,
    DeviceSpec,
    EfficiencyPoint,
)
from profiles.schema_network import (
    CommunicationProfile,
    ScaleUpFabric,
    TimePoint,
    Topology,
)
from profiles.schema_provenance import Provenance

DERIVED_ON = "2026-12-07"
"""Date of the derivation; change it when a figure or rule below changes."""
COMMAND = "python -m profiles.derive --write"
DATA_DIR = Path(__file__).resolve().parent / "data"

SOURCES: dict[str, str] = {
    "S1": "stas00/ml-engineering compute/accelerator/README.md @744d01e1 (peaks, MAMF)",
    "S2": "glennklockwood.com/garden/processors/A100 (NVIDIA A100 datasheet)",
    "S3": "thundercompute.com/blog/nvidia-a100-specs-full-guide; upb-pc2 A100 page",
    "S4": "NVIDIA H100 datasheet table (archive-lib.hpctech.co.jp/gpuproduct/nvidia-h100.html)",
    "S5": "glennklockwood.com/garden/processors/h100",
    "S6": "stas00/ml-engineering network/README.md @744d01e1 (links, nccl-tests runs)",
    "S7": "H200 specification pages (aiminingco.com/gpu/h200/specs and others)",
    "S8": "glennklockwood.com/garden/processors/B200 (NVIDIA Blackwell datasheet)",
    "S14": "yobitel.com/knowledge-base/amd-mi300x (secondary: xGMI, 400 Gb/s scale-out)",
    "S15": "developer.nvidia.com/blog/defining-ai-innovation-with-dgx-a100",
    "S16": "docs.nvidia.com/dgx-basepod reference architecture, core components",
    "S17": "DGX B200 datasheet facts via S1 note 20 and BasePOD S16",
    "S21": "NVIDIA/nccl#812 (DGX A100 8x200 Gb/s IB: 192 GB/s all_reduce busbw)",
    "S23": "pyptx.dev/performance (B200 cuBLAS bf16 reference timings)",
    "S24": "stas00/ml-engineering training/performance/README.md @744d01e1 (d_ff alignment)",
    "S25": "FlashAttention-2 paper (arXiv 2307.08691) summaries",
    "S26": "FlashAttention-3 paper (arXiv 2407.08608) abstract",
    "S27": "FlashAttention-3 paper figure extractions (H100 SXM5 fwd/bwd charts)",
    "S28": "pytorch/benchmark commit ff65cb6 (PR 2391): FA3 fwd d=128 re-run on H100",
    "S29": "NVIDIA/nccl-tests doc/PERFORMANCE.md @03a204a (busbw factors)",
    "S30": "NVIDIA/nccl-tests#212 (H100: ~370 GB/s ring, NVLS ~480)",
    "S33": "NVIDIA/nccl-tests#267 (CX-7 NDR 48-49 GB/s per NIC)",
    "S35": "NVIDIA/nccl v2.30 src/graph/tuning.cc (latency and per-link bandwidth model)",
    "S36": "NVIDIA/nccl#1455 (8xH100: RING 365-370, NVLS 370->480 for 4->8 GPUs)",
    "S37": "NVIDIA/nccl-tests#290 (H100 NVLS 420/440/460/480 for 5-8 GPUs; NDR 46-48 GB/s)",
    "S38": "NVIDIA/nccl#1281 (H100 reduce_scatter 360, all_gather 350 GB/s busbw)",
    "S39": "VIA-Research/vTrain @f8dda84 trace/a100 all_reduce LUTs",
    "S43": "NVIDIA/nccl-tests#319 (~48 GB/s per CX-7; ~396 GB/s RING over 8 NICs)",
    "S45": "NVIDIA/nccl#1244 (2x8 H20 small-message all_reduce ~46-48 us)",
    "S48": "calculon-ai/calculon @caa4b11 systems/a100_80g.json (efficiency tables)",
    "S9": "verda.com/blog/gb300-nvl72-architecture (per-GPU table: GB300, B300)",
    "S18": "docs.nvidia.com/dgx/dgxgb200-user-guide hardware.html and networking.html",
    "S19": "docs.nvidia.com/enterprise-reference-architectures/nvl72-ai-factory components "
    "(GB300 NVL72: 9 NVSwitch trays, 130 TB/s; tray of 4 GPUs with 4 ConnectX-8)",
    "S56": "glennklockwood.com/garden/processors/B300 (B300: 288 GB HBM3e, 8 TB/s, 1400 W; "
    "GB300 NVL72: 72 ConnectX-8 NICs)",
    "S55": "H. He, 'Strangely, Matrix Multiplications on GPUs Run Faster When Given "
    '"Predictable" Data!\' (thonking.ai, 2024): A100 8192^3 16-bit matmul, 295 TFLOP/s on '
    "zeros vs 257 on torch.randn inputs (power-limited clocks)",
    "S57": "NVIDIA/cudnn-frontend @b372d39 benchmark/sdpa_benchmark_training/artifacts/"
    "sdpa_bf16_benchmark_results_NVIDIA_{GB200,GB300}.csv (cudnn_fe, cuDNN 9.17.0, "
    "frontend 1.16.0, torch nv25.11; Llama-3.1-405B attention, causal, seq 512-131072)",
    "S58": "NVIDIA/cudnn-frontend @3929da2 benchmark/sdpa_benchmark_training/results/"
    "{llama3.1,dsv3,qwen35}/{gb200,gb300}/*_20260424_*.csv (cuDNN 9.22.0, frontend 1.21.1; "
    "bfloat16, and fp8 and mxfp8 for llama3.1 and dsv3)",
    "S59": "NVIDIA/cudnn-frontend @0b1577c benchmark/sdpa_benchmark_training/artifacts/"
    "sdpa_bf16_benchmark_results_NVIDIA_{B200,GB300}.csv (pyt_cudnn, cuDNN 9.13.0)",
    "S60": "thundergolfer.com/blog/nvidia-gpu-memory-capacity (Modal, 'Why does an NVIDIA "
    "H100 80GB card offer 85.52 GB?'): memory totals as NVML (nvidia-smi) reports them, "
    "H200 141 GB 143,771 MiB, H100 80 GB 81,559 MiB, A100 80GB 81,920 MiB, A100 40GB "
    "40,960 MiB",
    "S61": "NVIDIA/cudnn-frontend @3929da2 benchmark/sdpa_benchmark_training/results/"
    "h200_919_only_cudnn/llama3.1_20260227_034703.csv (H200, cuDNN 9.19.1, frontend 1.19.0; "
    "bfloat16 and fp8 Llama 3.1 attention, batch 1, 64/8 heads, d 128, seq 2048-32768)",
    "S62": "oracle-quickstart/oci-gpu-quickstarts @6a0abdc nvidia/{B300,GB200,GB300}/README-"
    "*.md (OCI nccl-tests alltoall_perf, out-of-place, sizes >= 4 GiB: 8x B300 NCCL 2.28.9; "
    "GB200 NVL72 4/8/64 GPUs; GB300 NVL72 4/8/64 GPUs NCCL 2.28.7)",
    "S63": "NVIDIA GTC 2025 session S72583 (NCCL), slide 13 'All-to-all Communication "
    "Bandwidth', as reproduced in stas00/ml-engineering @744d01e network/images/"
    "all-to-all-bw-2025.png: nccl-tests alltoall busbw, 8 GPUs: NVLink3 (A100) 210, NVLink4 "
    "(H100) 320, NVLink5 (B200) 640 GB/s; 32 GPUs: 8x 200Gb RDMA (DGX A100) 24, 8x 400Gb "
    "RDMA (DGX H100) 48, GB200 NVL72 640 GB/s",
    "S64": "mihai-amp/cluster-quality @1f1da58 poc_testing/b200_vultr/results/report/sources/"
    "nccl_tests_dgxc.log (Vultr HGX B200 acceptance run, nccl-tests 2.17.6, NCCL 2.28.9: "
    "alltoall_perf_mpi on 8 GPUs of one node, 128 B-16 GiB, and on 2 nodes x 8 GPUs)",
    "S50": "aliyun/SimAI vidur-alibabacloud/vidur/config/device_sku_config.py @2fd28fe "
    "(device SKUs: H800 fp16 989, fp8 1979 TFLOP/s, 80 GB)",
    "S65": "philisun.com/technical-analysis/nvidia-h800-vs-h100-a-technical-deep-dive-into-"
    "politically-defined-ai-chips (H800: the H100's GH100 die, 80 GB HBM3 at 3.35 TB/s; "
    "NVLink 400 GB/s bidirectional against H100 SXM's 900)",
    "S66": "DeepSeek-AI, DeepSeek-V3 Technical Report (arXiv 2412.19437) §3.1-3.2.2: 2048 "
    "H800, 8 per node on NVLink and NVSwitch, IB across nodes; 'NVLink offers a bandwidth "
    "of 160 GB/s, roughly 3.2 times that of IB (50 GB/s)'",
    "S67": "techpowerup.com news 'NVIDIA Prepares H800 Adaptation of H100 GPU for the Chinese "
    "Market' and tomshardware.com/news/nvidia-gimps-h100-hopper-gpu-to-sell-as-h800-to-"
    "china: A800 = A100 with chip-to-chip interconnect cut from 600 to 400 GB/s, the only "
    "difference",
}

# --- rules shared by every device -------------------------------------------------------

CALCULON_PEAK_TFLOPS = 312.0  # A100 fp16 matrix peak of Calculon's table [S48]
CALCULON_GEMM_STEPS = ((1.0, 0.6), (16.0, 0.9), (128.0, 0.95))  # (>= GFLOP, eff) [S48]
ALIGNMENT_ELEMENTS = 32  # d_ff 10848 = 32*339 ran at 395.6 TFLOP/s, full speed [S24]
MISALIGNED_FACTOR = round(272.7 / 398.4, 4)  # d_ff 10922 vs 10944 on H100 [S24]
MEMORY_BW_EFFICIENCY = 0.90  # Calculon A100 HBM efficiency at >= 100 MB [S48]

SEQ_LENS = (512, 1024, 2048, 4096, 8192, 16384)
# Shape of throughput against seq len: FA3 fwd d=128 re-run on H100 [S28]; the Triton FA2
# run of the same PR (329..477) rises in the same proportions.
_S28_FA3 = (430.0, 517.0, 566.0, 590.0, 614.0, 621.0)
SEQ_SHAPE = tuple((v - _S28_FA3[0]) / (_S28_FA3[-1] - _S28_FA3[0]) for v in _S28_FA3)

RULE_SOURCES = ("S1", "S24", "S28", "S29", "S35", "S45", "S48", "S55")
"""Sources of the rules above, cited by every profile."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Figures:
    """Transcribed figures of one device and the rules chosen where sources are silent."""

    name: str
    """Profile name (file stem)."""
    device_name: str
    """Marketing name."""
    vendor: str
    """Maker."""
    backend: str
    """Collective library."""
    peak_tflops: dict[str, float]
    """Dense peaks per dtype."""
    mamf_tflops: dict[str, float]
    """Measured best GEMM TFLOP/s per dtype (MAMF); other dtypes reuse bf16's fraction."""
    sustained_tflops: dict[str, float] = field(default_factory=dict)
    """TFLOP/s a large GEMM sustains on random data at the power limit, per dtype, where a
    source measured it; it replaces the burst MAMF as the curve's top (others reuse the
    bf16 sustained fraction)."""
    memory_gb: float
    """Vendor memory figure, GB as published."""
    nvml_memory_mib: float | None = None
    """Device memory as NVML (nvidia-smi) reports its total, MiB, where a source lists it;
    None: the vendor figure is read as GiB (`device_memory_gib`)."""
    hbm_tbps: float
    """HBM bandwidth, TB/s."""
    fabric: ScaleUpFabric
    """Scale-up fabric kind."""
    scale_up_GBps: float
    """Scale-up GB/s per GPU per direction."""
    peer_GBps: float | None = None
    """Per-peer GB/s on a mesh."""
    nic_Gbps_per_gpu: float
    """Scale-out NIC line rate per GPU, Gb/s (bits)."""
    nic_achieved_GBps: float
    """Busbw a ring reaches through one GPU's NIC, GB/s."""
    nic_alltoall_GBps: float | None = None
    """Rate an all_to_all across servers drives through one GPU's NIC, GB/s, where a source
    measured it (`profiles.derive_alltoall.AlltoallNetBar`); None: ``nic_achieved_GBps``."""
    intra_busbw: BusbwTable
    """Per op, per group size: (busbw GB/s, algorithm)."""
    intra_points: dict[tuple[str, int], tuple[TimePoint, ...]] = field(default_factory=dict)
    """Measured times of an intra fit, by (op, group size), where a source traced the
    collective over a range of sizes: `profiles.lookup.collective_time_s` scales the α-β
    line by their measured-to-line ratio. Empty: the line alone."""
    p2p_GBps: float
    """Intra-node send/recv GB/s."""
    latency8_us: float
    """Small-message 8-GPU all_reduce time, µs."""
    attention: tuple[AttentionCurve, ...]
    """Attention curves."""
    attention_kernel: str
    """Kernel the curves describe."""
    sources: tuple[str, ...]
    """Source keys used."""
    notes: tuple[str, ...] = ()
    """Device-specific assumptions."""
    gpus_per_node: int = 8
    """Devices per server (a compute tray on NVL72)."""
    scale_up_domain: int = 8
    """Devices in one NVLink domain (72 on NVL72: 18 trays of 4)."""
    generation: str
    """Architecture generation (`profiles.schema_device.GENERATIONS`)."""
    exp_per_s: float = 0.0
    """SFU exponentials per second of the device, 0 without a source."""


def device_memory_gib(fig: Figures) -> float:
    """The profile's ``memory_gib``: NVML's total / 1024 where sourced, else the vendor's
    GB figure read as GiB (HBM stacks come in binary sizes)."""
    if fig.nvml_memory_mib is not None:
        return fig.nvml_memory_mib / 1024.0
    return fig.memory_gb


def _memory_note(fig: Figures) -> str:
    if fig.nvml_memory_mib is not None:
        return (
            f"memory_gib is NVML's total, {fig.nvml_memory_mib:,.0f} MiB = "
            f"{device_memory_gib(fig):.2f} GiB [S60], not the vendor's {fig.memory_gb:g} GB: "
            "what nvidia-smi reports and a framework can allocate into (the CUDA context "
            "is allocated inside it); the cost model keeps its own reserve."
        )
    return (
        f"memory_gib reads the vendor's {fig.memory_gb:g} GB as GiB: HBM stacks come in "
        "binary sizes, and a decimal reading would understate what the runtime exposes "
        "(no NVML total is sourced for this device); the cost model keeps its own reserve."
    )


FRACTION_SOURCES: dict[str, str] = {"fp4": "fp8"}
"""Dtypes without a measured GEMM top that take another dtype's top fraction rather than
bf16's: NVFP4 (``fp4``) takes FP8's. No FP4 GEMM benchmark is sourced; the FP4 curve is the
FP8 curve at the same efficiencies with its GFLOP axis scaled by the FP4 peak (the same
time per output tile at twice the tile throughput), an assumption, not a measurement."""


def _top_fraction(fig: Figures, dtype: str) -> float:
    """Share of ``dtype``'s peak the largest GEMMs reach: its measured top, else the top
    fraction of its `FRACTION_SOURCES` dtype, else bf16's."""
    tops = fig.sustained_tflops or fig.mamf_tflops
    if dtype in tops:
        return tops[dtype] / fig.peak_tflops[dtype]
    if dtype in FRACTION_SOURCES:
        return _top_fraction(fig, FRACTION_SOURCES[dtype])
    return tops["bf16"] / fig.peak_tflops["bf16"]


def _gemm_curves(fig: Figures) -> dict[str, tuple[EfficiencyPoint, ...]]:
    top = CALCULON_GEMM_STEPS[-1][1]
    curves = {}
    for dtype, peak in fig.peak_tflops.items():
        fraction = _top_fraction(fig, dtype)
        curves[dtype] = tuple(
            EfficiencyPoint(
                gflop=round(g * peak / CALCULON_PEAK_TFLOPS, 6),
                efficiency=round(e / top * fraction, 4),
            )
            for g, e in CALCULON_GEMM_STEPS
        )
    return curves


def _shaped_points(lo: float, hi: float, seqs: tuple[int, ...]) -> tuple[AttentionPoint, ...]:
    """Points from ``lo`` at seqs[0] to ``hi`` at seqs[-1] along the [S28] shape."""
    shape = SEQ_SHAPE[: len(seqs)]
    span = shape[-1] - shape[0]
    return tuple(
        AttentionPoint(seq_len=s, tflops=round(lo + (f - shape[0]) / span * (hi - lo), 1))
        for s, f in zip(seqs, shape, strict=True)
    )


def h100_fa3_curves(scale: float) -> tuple[AttentionCurve, ...]:
    """FA3 on H100 SXM5, FP16 charts [S27] (bf16 runs at the same tensor-core rate).

    Forward: the lower chart of each head dim, the one consistent with a causal mask.
    Backward: the only chart (mask not stated); d=64 was charted to 2k only and is held
    beyond. ``scale`` carries the figures to another device (see `scaled_from_h100`).
    """
    endpoints = (  # (direction, head_dim, TFLOP/s at 512, at the last seq, last seq)
        ("forward", 64, 197.0, 473.0, 16384),
        ("forward", 128, 292.0, 616.0, 16384),
        ("forward", 256, 286.0, 642.0, 16384),
        ("backward", 64, 272.0, 422.0, 2048),
        ("backward", 128, 316.0, 561.0, 16384),
    )
    return tuple(
        AttentionCurve(
            direction=direction,
            dtype=dtype,
            head_dim=d,
            points=_shaped_points(lo * scale, hi * scale, tuple(s for s in SEQ_LENS if s <= last)),
        )
        for dtype in ("bf16", "fp16")
        for direction, d, lo, hi, last in endpoints
    )


def a100_fa2_curves() -> tuple[AttentionCurve, ...]:
    """FA2 on A100: 50-73% of the 312 TFLOP/s peak over seq 512-16k, head dims 64/128 [S25].

    No per-pass or per-head-dim table was found, so the range is spread over seq len along
    the [S28] shape and used for both passes (the H100 FA3 charts put backward within
    0.91-1.08 of the causal forward) and all head dims.
    """
    points = _shaped_points(0.50 * 312.0, 0.73 * 312.0, SEQ_LENS)
    return tuple(
        AttentionCurve(direction=direction, dtype=dtype, head_dim=128, points=points)
        for dtype in ("bf16", "fp16")
        for direction in ("forward", "backward")
    )


H100_BF16_MAMF = 794.5  # [S1]


def scaled_from_h100(mamf_bf16: float) -> tuple[AttentionCurve, ...]:
    """No attention figures: assume the kernel reaches the same share of the device's
    achievable GEMM rate (bf16 MAMF) as FA3 does on H100."""
    return h100_fa3_curves(mamf_bf16 / H100_BF16_MAMF)


def _top_note(fig: Figures) -> str:
    """Which measurement sets the top of the GEMM curve, and what the other dtypes reuse."""
    if fig.sustained_tflops:
        rates = ", ".join(f"{d} {v:g}" for d, v in fig.sustained_tflops.items())
        burst = ", ".join(f"{d} {v:g}" for d, v in fig.mamf_tflops.items())
        head = (
            f"GEMM top: sustained TFLOP/s on random data ({rates} [S55]) instead of the "
            f"burst MAMF ({burst} [S1])"
        )
        known = fig.sustained_tflops
    else:
        head = (
            "GEMM top: MAMF [S1], a burst figure (fastest of 100 iterations); no sustained "
            "random-data figure is sourced for this device (on A100 it is 5.2% lower [S55])"
        )
        known = fig.mamf_tflops
    fallback = [d for d in fig.peak_tflops if d not in known and d not in FRACTION_SOURCES]
    tail = f"; {', '.join(fallback)} reuse the bf16 fraction" if fallback else ""
    for dtype, source in FRACTION_SOURCES.items():
        if dtype in fig.peak_tflops and dtype not in known:
            tail += (
                f"; {dtype} reuses the {source} fraction on its own peak's GFLOP axis (the "
                f"{source} curve's time per tile; no {dtype} GEMM benchmark is sourced)"
            )
    return head + tail + "."


def _notes(fig: Figures) -> tuple[str, ...]:
    return (
        _memory_note(fig),
        "GEMM curve: Calculon A100 gflops_efficiency [S48], GFLOP axis scaled by peak/312, "
        "efficiency scaled so the largest GEMMs reach the top fraction; below 1 GFLOP "
        "(scaled) time is held constant.",
        _top_note(fig),
        f"Misaligned GEMM factor {MISALIGNED_FACTOR} for dims not multiples of "
        f"{ALIGNMENT_ELEMENTS} (H100 SwiGLU d_ff 10922 vs 10944 [S24]).",
        "Memory-bound kernels reach 0.90 of HBM peak (Calculon HBM efficiency >= 100 MB [S48]).",
        "Collectives: time = latency_s + bytes * factor / busbw (nccl-tests factors [S29]); "
        "intra alpha from the 8-GPU small all_reduce, grown with NCCL's ring LL model [S35]; "
        "inter alpha anchored at ~47 us for 2 nodes [S45]; inter busbw is the per-GPU NIC "
        "rate (one rank per node).",
        *fig.notes,
    )


def build_profile(fig: Figures) -> HardwareProfile:
    """The stored profile for one device's figures."""
    return HardwareProfile(
        name=fig.name,
        device=DeviceSpec(
            name=fig.device_name,
            vendor=fig.vendor,
            kind="gpu",
            peak_tflops=dict(fig.peak_tflops),
            memory_gib=device_memory_gib(fig),
            hbm_GBps=round(fig.hbm_tbps * 1000.0, 3),
            generation=fig.generation,
        ),
        compute=ComputeProfile(
            gemm_efficiency=_gemm_curves(fig),
            gemm_alignment_elements=ALIGNMENT_ELEMENTS,
            gemm_misaligned_factor=MISALIGNED_FACTOR,
            attention=fig.attention,
            attention_kernel=fig.attention_kernel,
            memory_bandwidth_efficiency=MEMORY_BW_EFFICIENCY,
            exp_per_s=fig.exp_per_s,
        ),
        communication=CommunicationProfile(
            backend=fig.backend,
            fits=collective_fits(
                intra_busbw=fig.intra_busbw,
                intra_points=fig.intra_points,
                latency8_us=fig.latency8_us,
                p2p_GBps=fig.p2p_GBps,
                nic_achieved_GBps=fig.nic_achieved_GBps,
                nic_alltoall_GBps=fig.nic_alltoall_GBps,
            ),
        ),
        topology=Topology(
            gpus_per_node=fig.gpus_per_node,
            scale_up_domain=fig.scale_up_domain,
            scale_up_fabric=fig.fabric,
            scale_up_GBps_per_gpu=fig.scale_up_GBps,
            scale_up_peer_GBps=fig.peer_GBps,
            nics_per_node=fig.gpus_per_node,
            nic_GBps_per_gpu=fig.nic_Gbps_per_gpu / 8.0,
        ),
        provenance=Provenance(
            method="derived",
            sources=tuple(
                f"[{k}] {SOURCES[k]}" for k in sorted({*fig.sources, *RULE_SOURCES}, key=_key_order)
            ),
            date=DERIVED_ON,
            command=COMMAND,
            notes=_notes(fig),
        ),
    )


def _key_order(key: str) -> int:
    return int(key[1:])
