"""Rules on the job's optimizer against the plan, as Megatron-core checks them for Muon.

Sources (NVIDIA/Megatron-LM at d7288711, the Megatron-LM of Megatron-Bridge tag v0.4.0):
``megatron/core/optimizer/muon.py`` ``get_megatron_muon_optimizer`` raises "muon with
dist optimizer is not supported" under ``use_distributed_optimizer`` (both ``muon`` and
``dist_muon``; Megatron-Bridge's Kimi-K2 recipe sets it False for Muon:
``src/megatron/bridge/recipes/kimi/kimi_k2.py``); ``megatron/training/arguments.py`` asserts
"Muon optimizer does not support overlap grad reduce. Use dist_muon instead." (and the same
for the parameter gather) for ``--optimizer muon``. Megatron-FSDP holds no per-rank whole
matrices for Muon to orthogonalize. A hybrid model's Mamba-2 mixers are not among the
matrices the Muon step is priced over (`muon_excludes_hybrid`).
"""

from __future__ import annotations

from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan
from specs.rules_base import rule


@rule
def muon_excludes_sharded_optimizer(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """Muon (``muon``, ``dist_muon``) runs without the distributed optimizer and without
    Megatron-FSDP: ``dist_muon`` shards by whole parameters itself."""
    if job.optimizer == "adam":
        return None
    given = [
        f"{name} (True)"
        for name, on in (
            ("distributed_optimizer", plan.distributed_optimizer),
            ("use_megatron_fsdp", plan.use_megatron_fsdp),
        )
        if on
    ]
    if not given:
        return None
    return (
        f"optimizer ({job.optimizer}) excludes {' and '.join(given)}: Megatron-core raises "
        "'muon with dist optimizer is not supported'; set distributed_optimizer=False and "
        "use_megatron_fsdp=False (optimizer dist_muon shards the optimizer layer-wise over "
        "dp·cp)"
    )


@rule
def muon_excludes_overlap(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """``--optimizer muon`` (not layer-wise) refuses overlapped gradient reduction and
    parameter gather (Megatron-LM ``validate_args``)."""
    if job.optimizer != "muon":
        return None
    given = [
        f"{name} (True)"
        for name, on in (
            ("overlap_grad_reduce", plan.overlap_grad_reduce),
            ("overlap_param_gather", plan.overlap_param_gather),
        )
        if on
    ]
    if not given:
        return None
    return (
        f"optimizer (muon) does not support {' and '.join(given)} (Megatron-LM asserts "
        "'Muon optimizer does not support overlap grad reduce. Use dist_muon instead.'): "
        "set them False, or use optimizer dist_muon"
    )


@rule
def muon_excludes_hybrid(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """Muon (``muon``, ``dist_muon``) is not priced for a hybrid model: the Megatron
    runtime's Muon step and sharding (`costmodel.optimizer_muon`) enumerate a transformer
    layer's matrices (QKV, output projection, MLP, experts), not a Mamba-2 mixer's
    (whose ``in_proj`` Megatron-core even marks ``use_muon`` False, ``mamba_mixer.py``)."""
    if job.optimizer == "adam" or not model.is_hybrid:
        return None
    return (
        f"optimizer ({job.optimizer}) on the hybrid model {model.name!r} is not priced: the "
        "Muon step is priced over transformer-layer matrices, not the Mamba-2 mixers' "
        f"(hybrid_layer_pattern {model.hybrid_layer_pattern!r}); use --optimizer adam"
    )


OPTIMIZER_RULES = (muon_excludes_sharded_optimizer, muon_excludes_overlap, muon_excludes_hybrid)
"""The optimizer rules in check order."""
