"""all_to_all busbw of the stored profiles, from published nccl-tests ``alltoall_perf``
figures (`profiles.derive_rules.SOURCES`): tables of runs [S62], the bars of NVIDIA's NCCL
chart [S63] and a full 8x B200 size sweep [S64].

Each run of a table is transcribed as (group size, message size, algbw) from its
out-of-place column; busbw follows nccl-tests' all_to_all convention, busbw = algbw ·
(n-1)/n with the message the total of one rank's send buffer
(`profiles.schema_network.BUS_FACTOR_DOC`, nccl-tests ``src/alltoall.cu``
``AlltoAllGetBw``). The published tables drop every size below 4 GiB, so they fix the
large-message rate only: the fits keep the α-β line (no measured points), and no curve
over the tens of MiB of an MoE exchange is sourced. A chart bar (`AlltoallChartFigure`)
prints the busbw alone, without message size or NCCL version: it is read as the same
large-message rate. The B200 sweep [S64] (`AlltoallSweepRow`) prints every size from 128 B
to 16 GiB: its 8 GiB row sets the line like the tables, and all its rows ride on the
8-GPU fit as measured points (`alltoall_points`), which `profiles.lookup.collective_time_s`
scales the line to.

Group sizes between two figures are interpolated in log2(n) and held beyond the outer
ones (`profiles.derive_collectives.log2_interpolated`). MI300X has no figure here: its
all_to_all rows follow its xGMI mesh table (`profiles.derive`).

Across servers, a bar of the chart's 32-GPU panel (`AlltoallNetBar`: 4 servers of 8 GPUs,
one NIC per GPU) fixes the rate an all_to_all drives through each NIC
(`AlltoallNetBar.nic_GBps`), which the profiles store as the busbw of their ``inter``
all_to_all fits (`profiles.derive_collectives.collective_fits`).
"""

from __future__ import annotations

from dataclasses import dataclass

from profiles.derive_collectives import BusbwTable, log2_interpolated
from profiles.schema_network import TimePoint

GIB = 2**30


@dataclass(frozen=True, kw_only=True, slots=True)
class AlltoallRun:
    """One row of a published ``alltoall_perf`` table (out-of-place)."""

    ranks: int
    """Ranks in the run, all inside one NVLink domain."""
    size_bytes: int
    """Message size in nccl-tests' convention (a rank's whole send buffer)."""
    algbw_GBps: float
    """Published algbw, GB/s."""

    @property
    def busbw_GBps(self) -> float:
        """nccl-tests all_to_all busbw: algbw · (n-1)/n."""
        return round(self.algbw_GBps * (self.ranks - 1) / self.ranks, 2)


# 8x B300 (OCI BM.GPU.B300.8, one HGX NVLink5 baseboard), NCCL 2.28.9+cuda13.1, 8 GiB:
# 11126 us, algbw 772.06, busbw 675.55 GB/s [S62] nvidia/B300/README-B300.md.
B300_ALLTOALL_RUNS = (AlltoallRun(ranks=8, size_bytes=8 * GIB, algbw_GBps=772.06),)

# GB200 NVL72 (OCI), 8 GiB rows [S62] nvidia/GB200/README-GB200.md; NCCL 2.27.3+cuda12.8
# in the same page's all_reduce runs (the all-to-all runs do not print it).
GB200_ALLTOALL_RUNS = (
    AlltoallRun(ranks=4, size_bytes=8 * GIB, algbw_GBps=820.40),  # 1 tray: busbw 615.30
    AlltoallRun(ranks=8, size_bytes=8 * GIB, algbw_GBps=751.78),  # 2 trays: busbw 657.81
    AlltoallRun(ranks=64, size_bytes=8 * GIB, algbw_GBps=632.81),  # 16 trays: busbw 622.92
)

# GB300 NVL72 (OCI BM.GPU.GB300.4 trays), NCCL 2.28.7+cuda13.0, 8 GiB rows [S62]
# nvidia/GB300/README-GB300.md.
GB300_ALLTOALL_RUNS = (
    AlltoallRun(ranks=4, size_bytes=8 * GIB, algbw_GBps=833.31),  # 1 tray: busbw 624.98
    AlltoallRun(ranks=8, size_bytes=8 * GIB, algbw_GBps=776.74),  # 2 trays: busbw 679.65
    AlltoallRun(ranks=64, size_bytes=8 * GIB, algbw_GBps=659.33),  # 16 trays: busbw 649.03
)


@dataclass(frozen=True, kw_only=True, slots=True)
class AlltoallSweepRow:
    """One out-of-place row of a published ``alltoall_perf`` size sweep."""

    size_bytes: int
    """Message size in nccl-tests' convention (a rank's whole send buffer)."""
    time_us: float
    """Published time of one call, µs."""
    algbw_GBps: float
    """Published algbw, GB/s."""
    busbw_GBps: float
    """Published busbw, GB/s (nccl-tests: algbw · (n-1)/n)."""


# 8x B200 on one HGX baseboard (Vultr, node gpu01), nccl-tests 2.17.6, NCCL 2.28.9
# (nccl-library=22809), alltoall_perf_mpi, uint8, out-of-place [S64]: (size B, time µs,
# algbw, busbw). Sizes below 128 B carry no element per rank pair and are left out.
# fmt: off
B200_ALLTOALL_SWEEP = tuple(
    AlltoallSweepRow(size_bytes=size, time_us=t, algbw_GBps=alg, busbw_GBps=bus)
    for size, t, alg, bus in (
        (128, 11.02, 0.01, 0.01), (256, 10.89, 0.02, 0.02), (512, 11.48, 0.04, 0.04),
        (1024, 11.11, 0.09, 0.08), (2048, 11.12, 0.18, 0.16), (4096, 11.25, 0.36, 0.32),
        (8192, 11.37, 0.72, 0.63), (16384, 11.97, 1.37, 1.20), (32768, 11.81, 2.78, 2.43),
        (65536, 12.44, 5.27, 4.61), (131072, 12.92, 10.14, 8.88),
        (262144, 13.68, 19.17, 16.77), (524288, 14.53, 36.08, 31.57),
        (1048576, 18.09, 57.96, 50.71), (2097152, 23.52, 89.15, 78.01),
        (4194304, 38.84, 107.98, 94.49), (8388608, 34.62, 242.29, 212.00),
        (16777216, 51.30, 327.04, 286.16), (33554432, 83.13, 403.65, 353.19),
        (67108864, 135.03, 496.98, 434.86), (134217728, 236.72, 566.98, 496.11),
        (268435456, 438.78, 611.77, 535.30), (536870912, 840.31, 638.89, 559.03),
        (1073741824, 1553.29, 691.27, 604.86), (2147483648, 3040.54, 706.28, 618.00),
        (4294967296, 5704.03, 752.97, 658.85), (8589934592, 11246.2, 763.81, 668.33),
        (17179869184, 22347.5, 768.76, 672.67),
    )
)
# fmt: on
B200_ALLTOALL_RUNS = tuple(
    AlltoallRun(ranks=8, size_bytes=row.size_bytes, algbw_GBps=row.algbw_GBps)
    for row in B200_ALLTOALL_SWEEP
    if row.size_bytes == 8 * GIB
)
"""The 8 GiB row of `B200_ALLTOALL_SWEEP`, the size the other tables are read at."""


def alltoall_points(rows: tuple[AlltoallSweepRow, ...]) -> tuple[TimePoint, ...]:
    """The measured times of a sweep, as points of the α-β fit of its group size."""
    return tuple(TimePoint(size_bytes=float(r.size_bytes), seconds=r.time_us * 1e-6) for r in rows)


@dataclass(frozen=True, kw_only=True, slots=True)
class AlltoallChartFigure:
    """One bar of a published nccl-tests alltoall busbw chart: the busbw of a group inside
    one node, its message size and NCCL version not printed."""

    ranks: int
    """Ranks in the group, all inside one NVLink domain."""
    busbw_GBps: float
    """Published busbw, GB/s (nccl-tests convention, algbw · (n-1)/n)."""

    @property
    def algbw_GBps(self) -> float:
        """The algbw the busbw implies: busbw · n/(n-1)."""
        return round(self.busbw_GBps * self.ranks / (self.ranks - 1), 2)


AlltoallFigure = AlltoallRun | AlltoallChartFigure
"""A published intra-domain all_to_all figure: a table row or a chart bar."""

# NVIDIA GTC 2025 session S72583 (NCCL), slide 13 "All-to-all Communication Bandwidth",
# left panel "NCCL Tests Alltoall Bus Bandwidth in GB/s, 8 GPUs" [S63]. The same panel
# prints NVLink5 (B200) 640, 5% below the 8x B300 run of [S62] that b200 uses.
A100_ALLTOALL_CHART = (AlltoallChartFigure(ranks=8, busbw_GBps=210.0),)  # "NVLink3 (A100)"
H100_ALLTOALL_CHART = (AlltoallChartFigure(ranks=8, busbw_GBps=320.0),)  # "NVLink4 (H100)"


@dataclass(frozen=True, kw_only=True, slots=True)
class AlltoallNetBar:
    """One bar of a published cross-node nccl-tests alltoall busbw chart: ``ranks`` GPUs
    on servers of ``ranks_per_node``, each GPU with its own NIC of ``nic_line_GBps``."""

    ranks: int
    """Ranks in the run."""
    ranks_per_node: int
    """Ranks on each server, all in one NVLink domain."""
    busbw_GBps: float
    """Published busbw, GB/s (nccl-tests convention, algbw · (n-1)/n)."""
    nic_line_GBps: float
    """Line rate of one GPU's NIC, GB/s (bytes: 400 Gb/s is 50 GB/s)."""

    @property
    def nic_GBps(self) -> float:
        """Rate each NIC carries: a rank sends (n-g)/n of its buffer S to other servers in
        the time t = S / algbw, so NIC rate = algbw · (n-g)/n = busbw · (n-g)/(n-1). The
        NVLink part, (g-1)/n of S, runs concurrently and is not the bound."""
        n, g = self.ranks, self.ranks_per_node
        return round(self.busbw_GBps * (n - g) / (n - 1), 2)

    @property
    def nic_efficiency(self) -> float:
        """`nic_GBps` as a fraction of the NIC's line rate."""
        return self.nic_GBps / self.nic_line_GBps


# Right panel of the same slide, "NCCL Tests Alltoall Bus Bandwidth in GB/s, 32 GPUs" [S63]:
# 4 servers x 8 GPUs, one NIC per GPU. NIC rate 24 · 24/31 = 18.58 GB/s (74% of 25) and
# 48 · 24/31 = 37.16 GB/s (74% of 50).
A100_ALLTOALL_NET_BAR = AlltoallNetBar(  # "8x 200Gb RDMA (DGX A100)"
    ranks=32, ranks_per_node=8, busbw_GBps=24.0, nic_line_GBps=25.0
)
H100_ALLTOALL_NET_BAR = AlltoallNetBar(  # "8x 400Gb RDMA (DGX H100)"
    ranks=32, ranks_per_node=8, busbw_GBps=48.0, nic_line_GBps=50.0
)


def alltoall_busbw(runs: tuple[AlltoallFigure, ...], sizes: tuple[int, ...]) -> dict[int, float]:
    """Busbw at each of ``sizes`` from ``runs``: the runs' busbw, interpolated in log2(n)
    between their group sizes and held beyond the smallest and largest."""
    known = {run.ranks: run.busbw_GBps for run in runs}
    return {n: round(bw, 2) for n, bw in log2_interpolated(known, sizes).items()}


def with_alltoall(table: BusbwTable, runs: tuple[AlltoallFigure, ...]) -> BusbwTable:
    """``table`` with its all_to_all rows replaced by `alltoall_busbw` over the same
    group sizes; the other ops are kept."""
    sizes = tuple(sorted(table["all_to_all"]))
    measured = alltoall_busbw(runs, sizes)
    out = {op: dict(rows) for op, rows in table.items()}
    out["all_to_all"] = {n: (measured[n], "direct") for n in sizes}
    return out


def alltoall_note(system: str, runs: tuple[AlltoallRun, ...], nccl: str) -> str:
    """The provenance note of a profile whose all_to_all rows come from ``runs``."""
    rows = ", ".join(f"{r.ranks} GPUs {r.busbw_GBps:g} GB/s (algbw {r.algbw_GBps:g})" for r in runs)
    size_gib = runs[0].size_bytes / GIB
    return (
        f"all_to_all intra busbw: nccl-tests alltoall_perf on {system}, {nccl}, "
        f"{size_gib:g} GiB, busbw = algbw·(n-1)/n: {rows} [S62]; other group sizes "
        "interpolated in log2(n) and held beyond the runs. Sizes below 4 GiB are not "
        "published, so the α-β line carries no measured points."
    )


def alltoall_sweep_note(system: str, rows: tuple[AlltoallSweepRow, ...], nccl: str) -> str:
    """The provenance note of a profile whose 8-GPU all_to_all fit comes from ``rows``."""
    line = next(r for r in rows if r.size_bytes == 8 * GIB)
    return (
        f"all_to_all intra busbw: nccl-tests alltoall_perf on {system}, {nccl}, "
        f"{rows[0].size_bytes:g} B to {rows[-1].size_bytes / GIB:g} GiB [S64]; the 8 GiB row "
        f"(busbw {line.busbw_GBps:g} GB/s, algbw {line.algbw_GBps:g}, busbw = algbw·(n-1)/n) "
        f"sets the line, and all {len(rows)} rows ride on the 8-GPU fit as measured points. "
        "2-7 GPUs hold the 8-GPU busbw without points."
    )


def alltoall_chart_note(system: str, figures: tuple[AlltoallChartFigure, ...]) -> str:
    """The provenance note of a profile whose all_to_all rows come from chart bars."""
    bars = ", ".join(
        f"{f.ranks} GPUs {f.busbw_GBps:g} GB/s (algbw {f.algbw_GBps:g})" for f in figures
    )
    return (
        f"all_to_all intra busbw: NVIDIA's nccl-tests alltoall chart (GTC 2025 S72583), "
        f"{system}: {bars} [S63]; message size and NCCL version not printed, read as the "
        "large-message rate; other group sizes hold the figure. The α-β line carries no "
        "measured points."
    )


def alltoall_net_note(system: str, bar: AlltoallNetBar) -> str:
    """The provenance note of a profile whose inter all_to_all fits come from ``bar``."""
    return (
        f"all_to_all inter busbw: NVIDIA's nccl-tests alltoall chart (GTC 2025 S72583), "
        f"{system}: {bar.ranks} GPUs on {bar.ranks // bar.ranks_per_node} servers "
        f"{bar.busbw_GBps:g} GB/s busbw [S63]; (n-g)/n of a rank's bytes leave the server, "
        f"so each NIC carries busbw·(n-g)/(n-1) = {bar.nic_GBps:g} GB/s "
        f"({bar.nic_efficiency:.0%} of its {bar.nic_line_GBps:g} GB/s line rate), the "
        "busbw of every inter all_to_all fit. The other inter collectives keep the ring "
        "figure."
    )
