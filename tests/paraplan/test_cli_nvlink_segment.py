"""`--nvlink-segment-nodes` and the NVLink domain line of `estimate` and `plan`
(paraplan.args, paraplan.placement_line)."""

from __future__ import annotations

import pytest

from paraplan.cli import main

BASE = ["--model", "qwen3-30b-a3b", "--seq-len", "4096", "--global-batch", "512"]
PLAN = ["--tp", "1", "--pp", "2", "--ep", "16", "--dist-opt"]
GB200 = ["--hardware", "gb200-nvl72", "--num-gpus", "128"]


def _domain_line(capsys, *flags: str) -> str:
    assert main(["estimate", *BASE, *PLAN, *GB200, *flags]) == 0
    out = capsys.readouterr().out
    return next(line for line in out.splitlines() if line.startswith("NVLink domain:"))


def test_estimate_names_the_launcher_segment(capsys) -> None:
    line = _domain_line(capsys)
    # 32 trays: Megatron-Bridge's launcher takes segments of 16 (the largest divisor <= 18)
    assert "64 GPUs (segments of 16 servers x 4, Megatron-Bridge launcher rule)" in line
    assert "ep over" not in line


def test_estimate_names_the_groups_that_cross_racks_without_a_segment(capsys) -> None:
    line = _domain_line(capsys, "--nvlink-segment-nodes", "18")
    assert "72 GPUs (racks of 18 servers x 4, --nvlink-segment-nodes 18)" in line
    assert "ep over 2" in line and "dp-cp over 2" in line


def test_one_server_domains_print_no_line(capsys) -> None:
    assert main(["estimate", *BASE, *PLAN, "--hardware", "b200", "--num-gpus", "128"]) == 0
    assert "NVLink domain:" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("flags", "rule"),
    [
        (["--nvlink-segment-nodes", "12"], "nvlink_segment_divides_nodes"),
        (["--nvlink-segment-nodes", "20"], "nvlink_segment_within_domain"),
        (["--hardware", "b200", "--nvlink-segment-nodes", "4"], "nvlink_segment_spans_servers"),
    ],
)
def test_refusals_exit_2_with_the_flag_and_the_rule(capsys, flags, rule) -> None:
    assert main(["estimate", *BASE, *PLAN, *GB200, *flags]) == 2
    err = capsys.readouterr().err
    assert rule in err and "--nvlink-segment-nodes" in err


def test_sizing_refuses_a_segment(capsys) -> None:
    argv = ["plan", *BASE, "--hardware", "gb200-nvl72", "--tokens", "1e9", "--max-gpus", "64"]
    assert main([*argv, "--nvlink-segment-nodes", "4"]) == 2
    assert "--tokens tries several" in capsys.readouterr().err
