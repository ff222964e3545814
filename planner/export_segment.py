"""The NVLink segment in the exports of a plan priced on a profile whose scale-up domain
spans servers (NVL72).

The plan's groups were placed in the job's NVLink segment
(`costmodel.placement_domain.placement_domain`), which SLURM gives a job with ``sbatch
--segment=N``: whole segments of N consecutive nodes, each inside one NVLink domain
(block topology). Megatron-Bridge's performance launcher passes it for 4-GPU nodes
(``segment=`` of nemo_run's ``SlurmExecutor`` in ``slurm_executor``,
`scripts/performance/utils/executors.py`, releases v0.3.0 to v0.6.0; the rule:
`costmodel.scale_up`). The Megatron-LM snippet writes it as an ``#SBATCH`` directive,
which ``sbatch`` reads from the comment block at the head of a batch script, after a
comment naming the domain (`segment_header`); the torchtitan TOML, which launches nothing,
carries the comment alone. A job priced in racks filled in order (a whole domain's servers
that do not divide the job's) runs without ``--segment``: the comment says so and no
directive is written. On other profiles both are absent.
"""

from __future__ import annotations

from costmodel.placement_domain import placement_domain
from profiles.store import load_profile
from specs.bundle import PlanBundle


def segment_header(bundle: PlanBundle, *, sbatch: bool) -> list[str]:
    """Header lines of an export of ``bundle``: a comment naming the NVLink domain the plan
    was priced in and how the job is launched into it, and with ``sbatch`` the
    ``#SBATCH --segment=N`` directive where that is segments of N servers; no line on a
    profile whose scale-up domain is one server."""
    profile = load_profile(bundle.cluster.hardware)
    domain = placement_domain(bundle.cluster, profile, bundle.plan)
    if domain is None:
        return []
    source = (
        f"the plan's nvlink_segment_nodes {domain.segment_nodes}"
        if domain.source == "user"
        else "Megatron-Bridge's launcher rule"
    )
    shape = (
        f"{domain.segment_nodes} servers x {domain.gpus_per_node} GPUs "
        f"({domain.gpus_per_domain} GPUs, {source})"
    )
    if domain.kind == "racks":
        return [f"# priced in NVLink racks of {shape} filled in order: launch without --segment"]
    note = (
        f"# priced in NVLink segments of {shape}: launch with SLURM "
        f"--segment={domain.segment_nodes}, as Megatron-Bridge's launcher does"
    )
    return [note, f"#SBATCH --segment={domain.segment_nodes}"] if sbatch else [note]
