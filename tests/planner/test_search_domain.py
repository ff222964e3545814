"""The scale-up domain the planner generates TP degrees in: the NVLink segment of a rack-scale
profile (`planner.search.search_domain`, `costmodel.scale_up.placement_domain_size`)."""

from __future__ import annotations

from planner.candidates import enumerate_candidates
from planner.search import search_domain
from planner.space import SearchSpace
from profiles import load_profile
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.presets import get_preset


def _tps(cluster: ClusterSpec) -> set[int]:
    profile = load_profile(cluster.hardware)
    job = TrainingJob(seq_length=2048, global_batch_size=256)
    space = SearchSpace(fixed={"pp": 1, "cp": 1, "micro_batch_size": 1})
    cands = enumerate_candidates(
        get_preset("gpt-7.5b"), cluster, job, space, search_domain(profile, cluster)
    )
    return set(cands.table["tp"])


def test_segment_of_128_gb200_is_64_gpus():
    # Megatron-Bridge slurm_executor (scripts/performance/utils/executors.py, v0.3.0-v0.6.0):
    # 32 trays > 18, largest divisor <= 18 is 16 trays = 64 GPUs.
    profile = load_profile("gb200-nvl72")
    assert search_domain(profile, ClusterSpec(hardware="gb200-nvl72", num_gpus=128)) == 64
    whole_rack = ClusterSpec(hardware="gb200-nvl72", num_gpus=128, nvlink_segment_nodes=18)
    assert search_domain(profile, whole_rack) == 72
    assert search_domain(profile, ClusterSpec(hardware="gb200-nvl72", num_gpus=32)) == 32


def test_server_fabric_unchanged():
    profile = load_profile("h100-sxm-80gb")
    assert search_domain(profile, ClusterSpec(hardware="h100-sxm-80gb", num_gpus=64)) == 8


def test_tp16_generated_inside_a_64_gpu_segment_only():
    # 32 heads: TP 16 and 32 divide 64 GPUs of a segment, not a 72-GPU rack.
    segmented = _tps(ClusterSpec(hardware="gb200-nvl72", num_gpus=128))
    racks = _tps(ClusterSpec(hardware="gb200-nvl72", num_gpus=128, nvlink_segment_nodes=18))
    assert {16, 32} <= segmented
    assert not {16, 32} & racks
    assert {1, 2, 4, 8} <= racks
