"""Collective rules of the stored profiles' derivation (`profiles.derive_rules`): NCCL's
latency model [S35] anchored on measured small-message times, the group sizes stored, the
NVSwitch busbw table (`switch_busbw`) and the α-β fits of one device (`collective_fits`).
Source keys are those of `profiles.derive_rules.SOURCES`.
"""

from __future__ import annotations

import math

from profiles.schema_network import CollectiveFit, TimePoint

# NCCL 2.30 latency model, µs [S35]: ring LL base and per-hop latencies.
NCCL_RING_LL_BASE_US = 6.6
NCCL_NVLINK_RING_LL_HOP_US = 0.6
NCCL_NET_RING_LL_HOP_US = 2.7
NCCL_TREE_LL_BASE_US = 6.8
NCCL_NET_TREE_LL_HOP_US = 5.0
INTER_2NODE_LATENCY_US = 47.0  # 2 nodes, small all_reduce ~46-48 µs [S45]

INTRA_SIZES = tuple(range(2, 9))
NVL72_INTRA_SIZES = (*INTRA_SIZES, 16, 32, 64, 72)
"""Intra group sizes stored for a 72-GPU NVLink domain."""
INTER_SIZES = (*range(2, 9), 16, 32, 64, 128, 256, 512, 1024)
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")

BusbwTable = dict[str, dict[int, tuple[float, str]]]


def log2_interpolated(known: dict[int, float], sizes: tuple[int, ...]) -> dict[int, float]:
    """Fill ``sizes`` from ``known`` group sizes, linearly in log2(n)."""
    pts = sorted(known.items())
    out = {}
    for n in sizes:
        lo = max((p for p in pts if p[0] <= n), default=pts[0])
        hi = min((p for p in pts if p[0] >= n), default=pts[-1])
        t = 0.0 if hi[0] == lo[0] else math.log2(n / lo[0]) / math.log2(hi[0] / lo[0])
        out[n] = lo[1] + t * (hi[1] - lo[1])
    return out


# NVLS all_reduce busbw on 8xH100 per group size [S36][S37]; sizes <= 4 run at ring rate.
H100_RING_GBPS = 370.0  # [S30][S36]
H100_NVLS_GBPS = {5: 420.0, 6: 440.0, 7: 460.0, 8: 480.0}  # [S37]


def switch_busbw(*, ring: float, nvls8: float, ag: float, rs: float, a2a: float) -> BusbwTable:
    """NVSwitch node: flat ring busbw over 2-8 GPUs (measured flat on H100 [S30]); NVLS
    all_reduce from 5 GPUs up, rising towards the 8-GPU figure as on H100 [S37]."""
    table: BusbwTable = {
        "all_gather": {n: (ag, "ring") for n in INTRA_SIZES},
        "reduce_scatter": {n: (rs, "ring") for n in INTRA_SIZES},
        "all_to_all": {n: (a2a, "direct") for n in INTRA_SIZES},
        "all_reduce": {n: (ring, "ring") for n in INTRA_SIZES},
    }
    for n, h100 in H100_NVLS_GBPS.items():
        share = (h100 - H100_RING_GBPS) / (H100_NVLS_GBPS[8] - H100_RING_GBPS)
        table["all_reduce"][n] = (round(ring + share * (nvls8 - ring), 2), "nvls")
    return table


def _steps(op: str, n: int) -> int:
    """Sequential ring steps of ``op`` over n ranks (NCCL: 2(n-1) all_reduce, n-1 others)."""
    return {"all_reduce": 2 * (n - 1), "send_recv": 1}.get(op, n - 1)


def _intra_latency_s(op: str, n: int, latency8_us: float) -> float:
    """α inside a node: the measured 8-GPU small all_reduce time sets the level (launch
    and software overhead included), NCCL's LL ring model sets the growth with n [S35]:
    α = t8 - model(all_reduce, 8) + model(op, n), model = base + steps · NVLink hop."""

    def model(o: str, k: int) -> float:
        return NCCL_RING_LL_BASE_US + _steps(o, k) * NCCL_NVLINK_RING_LL_HOP_US

    return round((latency8_us - model("all_reduce", 8) + model(op, n)) * 1e-6, 9)


def _inter_latency_s(op: str, n: int) -> float:
    """α with one rank per node: anchored at the 2-node small all_reduce time [S45]; growth
    from NCCL's network model [S35], the smaller of a ring (steps · NET ring hop) and a
    log2(n)-depth tree (2 · log2(n) · NET tree hop for all_reduce, log2(n) for the others),
    since NCCL picks the faster algorithm for small messages."""

    def model(o: str, k: int) -> float:
        ring = NCCL_RING_LL_BASE_US + _steps(o, k) * NCCL_NET_RING_LL_HOP_US
        depth = (2 if o == "all_reduce" else 1) * math.log2(k)
        tree = NCCL_TREE_LL_BASE_US + depth * NCCL_NET_TREE_LL_HOP_US
        return ring if o in ("send_recv", "all_to_all") else min(ring, tree)

    return round((INTER_2NODE_LATENCY_US - model("all_reduce", 2) + model(op, n)) * 1e-6, 9)


def collective_fits(
    *,
    intra_busbw: BusbwTable,
    intra_points: dict[tuple[str, int], tuple[TimePoint, ...]],
    latency8_us: float,
    p2p_GBps: float,
    nic_achieved_GBps: float,
    nic_alltoall_GBps: float | None = None,
) -> tuple[CollectiveFit, ...]:
    """Every stored collective fit of one device: each op and group size of
    ``intra_busbw`` inside a node (α from `_intra_latency_s`, measured ``intra_points``
    where a source traced them), the intra-node send/recv at ``p2p_GBps``, and every op at
    `INTER_SIZES` with one rank per node at the NIC's ``nic_achieved_GBps`` (α from
    `_inter_latency_s`), all_to_all at ``nic_alltoall_GBps`` where a source measured it
    (`profiles.derive_alltoall.AlltoallNetBar`)."""
    fits = []
    for op in COLLECTIVES:
        for n, (busbw, algorithm) in sorted(intra_busbw[op].items()):
            fits.append(
                CollectiveFit(
                    op=op,
                    group_size=n,
                    placement="intra",
                    latency_s=_intra_latency_s(op, n, latency8_us),
                    busbw_GBps=busbw,
                    algorithm=algorithm,
                    points=intra_points.get((op, n), ()),
                )
            )
    fits.append(
        CollectiveFit(
            op="send_recv",
            group_size=2,
            placement="intra",
            latency_s=_intra_latency_s("send_recv", 2, latency8_us),
            busbw_GBps=p2p_GBps,
            algorithm="p2p",
        )
    )
    for op in (*COLLECTIVES, "send_recv"):
        busbw = nic_achieved_GBps
        if op == "all_to_all" and nic_alltoall_GBps is not None:
            busbw = nic_alltoall_GBps
        for n in INTER_SIZES if op != "send_recv" else (2,):
            fits.append(
                CollectiveFit(
                    op=op,
                    group_size=n,
                    placement="inter",
                    latency_s=_inter_latency_s(op, n),
                    busbw_GBps=busbw,
                    algorithm="p2p" if op == "send_recv" else "ring",
                )
            )
    return tuple(fits)
