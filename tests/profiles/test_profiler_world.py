"""The profiler's world, group layouts and device facts (`profiles.profiler.world`,
`profiles.profiler.comm`, `profiles.profiler.device`, `profiles.profiler.assemble`) without
ranks."""

from __future__ import annotations

from pathlib import Path

import pytest

from profiles.profiler.assemble import datasheet_match
from profiles.profiler.comm import group_layouts, message_elements, ops_for
from profiles.profiler.device import cpu_identity, infiniband_nics, nvml_facts
from profiles.profiler.world import _failure_message, check_nproc, threads_per_rank
from specs.errors import SpecError


def test_group_layouts_on_one_node_and_across_two() -> None:
    one = {(g.placement, g.group_size): g.groups for g in group_layouts(4, 4)}
    assert one == {
        ("intra", 2): ((0, 1), (2, 3)),
        ("intra", 3): ((0, 1, 2),),
        ("intra", 4): ((0, 1, 2, 3),),
    }
    two = {(g.placement, g.group_size): g.groups for g in group_layouts(8, 4)}
    assert two[("intra", 2)] == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert two[("inter", 2)] == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert "send_recv" in ops_for(group_layouts(2, 2)[0])
    assert message_elements(1024, 3) == 255


def test_nproc_rule_is_four_ranks_per_core_and_one_per_gpu() -> None:
    check_nproc(8, cuda_devices=0, num_cpus=2, mem_bytes=None)
    with pytest.raises(SpecError, match=r"4 ranks per CPU core x 2 cores = 8"):
        check_nproc(9, cuda_devices=0, num_cpus=2, mem_bytes=None)
    with pytest.raises(SpecError, match="CUDA devices"):
        check_nproc(9, cuda_devices=8, num_cpus=64, mem_bytes=None)
    with pytest.raises(SpecError, match="MiB"):
        check_nproc(4, cuda_devices=0, num_cpus=8, mem_bytes=2**30)
    with pytest.raises(SpecError, match="positive"):
        check_nproc(0, cuda_devices=0, num_cpus=2, mem_bytes=None)
    assert threads_per_rank(16, 4) == 4 and threads_per_rank(2, 4) == 1


def test_failure_message_names_the_dead_rank_before_its_peers_errors() -> None:
    failures = [
        {
            "rank": 0,
            "error_type": "RuntimeError",
            "message": "Connection closed by peer\nmore",
            "time_s": 1.0,
        },
        {
            "rank": 1,
            "error_type": "ProcessDied",
            "message": "rank 1 was killed by SIGKILL",
            "time_s": 2.0,
        },
    ]
    text = _failure_message(failures, stopped={2})
    assert text.startswith("profiling failed: rank 1 ProcessDied: rank 1 was killed by SIGKILL")
    assert "rank 0 (RuntimeError)" in text and "rank 2 (stopped)" in text and "\n" not in text


def test_cpu_identity_and_missing_gpu_facts_are_not_errors(tmp_path: Path) -> None:
    text = "vendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9654 96-Core Processor\n"
    assert cpu_identity(text) == ("AMD EPYC 9654 96-Core Processor", "AMD")
    assert cpu_identity("") == (None, None)
    assert nvml_facts(0) == {} or "driver_version" in nvml_facts(0)
    assert infiniband_nics(tmp_path / "absent") == (0, None)
    port = tmp_path / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
    assert infiniband_nics(tmp_path) == (1, 50.0)


def test_datasheet_match_pairs_gpus_with_stored_profiles_only() -> None:
    h200 = datasheet_match("NVIDIA H200")
    assert h200 is not None and h200.name == "h200-sxm-141gb"
    h100 = datasheet_match("NVIDIA H100 80GB HBM3")
    assert h100 is not None and h100.name == "h100-sxm-80gb"
    assert datasheet_match("NVIDIA H100 PCIe") is None  # other peaks than the SXM part
    assert datasheet_match("AMD EPYC") is None
