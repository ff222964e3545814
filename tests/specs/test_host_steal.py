"""Steal time of a virtual machine (`specs.host.stolen_cpu_s`, `specs.host.steal_fraction`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specs.host import steal_fraction, stolen_cpu_s

STAT = """cpu  1124340 52 245660 696065 3285 0 16779 73986 0 0
cpu0 562170 26 122830 348032 1642 0 8389 36993 0 0
intr 1 2 3
"""


def test_stolen_cpu_s_reads_the_steal_column_in_user_hz_ticks(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text(STAT)
    # the eighth value of the cpu line (73986 ticks), not cpu0's
    assert stolen_cpu_s(stat) == pytest.approx(73986 / os.sysconf("SC_CLK_TCK"))


@pytest.mark.parametrize(
    "text",
    [
        "cpu  1 2 3 4 5 6 7\n",  # a kernel before steal was reported
        "intr 1 2 3 4 5 6 7 8 9\n",  # no cpu line first
        "",
    ],
)
def test_stolen_cpu_s_is_none_without_a_steal_column(tmp_path: Path, text: str) -> None:
    stat = tmp_path / "stat"
    stat.write_text(text)
    assert stolen_cpu_s(stat) is None


def test_stolen_cpu_s_is_none_without_proc(tmp_path: Path) -> None:
    assert stolen_cpu_s(tmp_path / "missing") is None


def test_this_kernel_counts_steal_forward() -> None:
    first = stolen_cpu_s()
    if first is None:
        pytest.skip("this kernel does not report steal time")
    assert 0.0 <= first <= (stolen_cpu_s() or 0.0)


def test_steal_fraction_is_the_share_of_the_machines_cpu_time() -> None:
    # 0.1 CPU seconds stolen from 2 CPUs over 0.5 s of wall time: 10% of 1 CPU second
    assert steal_fraction(0.1, 0.5, 2) == pytest.approx(0.1)
    assert steal_fraction(0.0, 0.5, 2) == 0.0
    assert steal_fraction(0.1, 0.0, 2) == 0.0
