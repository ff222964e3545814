"""Intra-domain all_to_all fits of the stored profiles against the published
``alltoall_perf`` runs of [S62] (oracle-quickstart/oci-gpu-quickstarts @6a0abdc)."""

from __future__ import annotations

import pytest

from profiles.derive_alltoall import (
    B300_ALLTOALL_RUNS,
    GB200_ALLTOALL_RUNS,
    GB300_ALLTOALL_RUNS,
    AlltoallRun,
    alltoall_busbw,
    with_alltoall,
)
from profiles.lookup import collective_fit
from profiles.store import load_profile

GIB = 2**30


@pytest.mark.parametrize(
    ("run", "published_busbw"),
    [
        # nvidia/B300/README-B300.md, 8 GiB: algbw 772.06, busbw 675.55 (NCCL 2.28.9).
        (B300_ALLTOALL_RUNS[0], 675.55),
        # nvidia/GB200/README-GB200.md, 8 GiB: 4 / 8 / 64 GPUs.
        (GB200_ALLTOALL_RUNS[0], 615.30),
        (GB200_ALLTOALL_RUNS[1], 657.81),
        (GB200_ALLTOALL_RUNS[2], 622.92),
        # nvidia/GB300/README-GB300.md, 8 GiB: 4 / 8 / 64 GPUs (NCCL 2.28.7).
        (GB300_ALLTOALL_RUNS[0], 624.98),
        (GB300_ALLTOALL_RUNS[1], 679.65),
        (GB300_ALLTOALL_RUNS[2], 649.03),
    ],
    ids=lambda v: f"{v.ranks}gpu" if isinstance(v, AlltoallRun) else str(v),
)
def test_busbw_from_algbw_reproduces_the_published_column(run, published_busbw) -> None:
    # nccl-tests AlltoAllGetBw: busbw = algbw * (n-1)/n; the tables print both columns.
    assert run.size_bytes == 8 * GIB
    assert run.busbw_GBps == pytest.approx(published_busbw, abs=0.01)


@pytest.mark.parametrize(
    ("name", "group", "busbw"),
    [
        ("b300", 8, 675.55),  # 8x B300 run [S62]
        ("b300", 2, 675.55),  # held below the only run
        ("b200", 8, 675.55),  # B300's run: same 8-GPU NVLink5 switch baseboard
        ("gb200-nvl72", 4, 615.30),  # one tray [S62]
        ("gb200-nvl72", 8, 657.81),  # two trays [S62]
        ("gb200-nvl72", 64, 622.92),  # 16 trays [S62]
        ("gb200-nvl72", 72, 622.92),  # held beyond 64
        ("gb300-nvl72", 4, 624.98),
        ("gb300-nvl72", 8, 679.65),
        ("gb300-nvl72", 64, 649.03),
    ],
)
def test_stored_profiles_carry_the_measured_alltoall_busbw(name, group, busbw) -> None:
    fit = collective_fit(load_profile(name), "all_to_all", group, "intra")
    assert fit.busbw_GBps == pytest.approx(busbw)
    assert fit.points == ()


def test_group_sizes_between_runs_interpolate_in_log2() -> None:
    # 16 GPUs sits a third of the way (in log2 n) from the 8-GPU to the 64-GPU run:
    # 657.81 + (622.92 - 657.81) / 3 = 646.18 on GB200 [S62].
    assert alltoall_busbw(GB200_ALLTOALL_RUNS, (16,))[16] == pytest.approx(646.18)


def test_with_alltoall_keeps_the_other_ops() -> None:
    table = {
        "all_gather": {2: (100.0, "ring"), 8: (100.0, "ring")},
        "all_to_all": {2: (100.0, "direct"), 8: (100.0, "direct")},
    }
    runs = (AlltoallRun(ranks=8, size_bytes=GIB, algbw_GBps=80.0),)
    out = with_alltoall(table, runs)
    assert out["all_gather"] == table["all_gather"]
    assert out["all_to_all"] == {2: (70.0, "direct"), 8: (70.0, "direct")}


@pytest.mark.parametrize("name", ["a100-sxm-80gb", "h100-sxm-80gb", "h200-sxm-141gb"])
def test_unsourced_profiles_keep_their_figure_and_say_so(name) -> None:
    # No published intra-node alltoall_perf table was found for these systems: they keep
    # the all_gather figure (A100: the ring all_reduce) and a "no source" note.
    profile = load_profile(name)
    a2a = collective_fit(profile, "all_to_all", 8, "intra")
    ag = collective_fit(profile, "all_gather", 8, "intra")
    assert a2a.busbw_GBps == ag.busbw_GBps
    notes = " ".join(profile.provenance.notes)
    assert "no source" in notes or "no A100 source" in notes
