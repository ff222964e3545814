"""`--nvlink-segment-nodes` and the NVLink domain line of `estimate` and `plan`
(paraplan.args, paraplan.placement_line)."""

from __future__ import annotations

import json

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


def _estimate_json(capsys, *flags: str) -> dict:
    assert main(["estimate", *BASE, *PLAN, *flags, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_estimate_json_reads_back_the_domain_of_the_text_line(capsys) -> None:
    line = _domain_line(capsys, "--nvlink-segment-nodes", "18")
    placement = _estimate_json(capsys, *GB200, "--nvlink-segment-nodes", "18")["placement"]
    # stage 1 holds ranks 64..127 and racks end at rank 72: its data-parallel and expert
    # groups straddle two racks, and so do the pipeline pairs {r, r + 64} for r >= 8
    assert placement == {
        "kind": "racks",
        "gpus_per_domain": 72,
        "segment_nodes": 18,
        "gpus_per_node": 4,
        "source": "user",
        "groups_across_domains": {"dp-cp": 2, "ep": 2, "edp": 2, "pp": 2},
    }
    crossing = ", ".join(f"{a} over {k}" for a, k in placement["groups_across_domains"].items())
    assert line.endswith(f"groups across domains: {crossing}")
    launcher = _estimate_json(capsys, *GB200)["placement"]
    assert (launcher["kind"], launcher["gpus_per_domain"], launcher["source"]) == (
        "segments",
        64,
        "launcher",
    )
    # each 64-rank stage fills one 64-GPU segment: only the pipeline crosses
    assert launcher["groups_across_domains"] == {"pp": 2}


def test_estimate_json_has_no_placement_on_one_server_domains(capsys) -> None:
    assert "placement" not in _estimate_json(capsys, "--hardware", "b200", "--num-gpus", "128")


def test_plan_json_carries_the_best_plans_domain(capsys) -> None:
    argv = ["plan", *BASE, *GB200, "--top", "1", "--json", "--nvlink-segment-nodes", "18"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["placement"]["gpus_per_domain"] == 72 and out["placement"]["source"] == "user"
