"""`ParallelContext`: the device mesh and the named process groups of one rank.

Group membership comes from `specs.layout.RankLayout`, the same pure function the cost
model uses, so both agree on who talks to whom. Ranks follow Megatron-LM's default order
`tp-cp-ep-dp-pp` (leftmost varies fastest, megatron-facts.md §4.2): for dense layers

    rank = tp_i + tp·(cp_i + cp·(dp_i + dp·pp_i)),

which is row-major order over the mesh dims ``("pp", "dp", "cp", "tp")`` (slowest to
fastest), the dense `DeviceMesh`. Expert layers use a second grid over the same ranks,

    rank = etp_i + etp·(ep_i + ep·(edp_i + edp·pp_i)),

row-major over ``("pp", "edp", "ep", "etp")``, the expert `DeviceMesh`. Worked example,
8 ranks with tp=2, pp=2, dp=2 and ep=2 (etp=1): tp groups (0,1) (2,3) (4,5) (6,7); dp groups
(0,2) (1,3) (4,6) (5,7); pp groups (0,4) (1,5) (2,6) (3,7); ep groups (0,1) (2,3) (4,5)
(6,7); expert-dp groups (0,2) (1,3) (4,6) (5,7).

Named groups: ``tp``, ``cp``, ``dp``, ``pp``; ``dp_cp`` (gradient reduction of dense
parameters, Megatron's DP x CP); ``tp_cp`` (the ranks sharing one micro-batch's sequences
under SP and CP); ``ep`` and ``edp`` (expert parallel, and the reduction group of expert
parameters); ``embedding`` (first and last pipeline stage of a pipeline, holding the two
copies of a tied embedding; only when pp > 1). Nothing here is module-level state: the
context is built once and passed around.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from specs.errors import SpecError
from specs.layout import RankLayout
from specs.plan import ParallelPlan

DENSE_MESH_DIMS = ("pp", "dp", "cp", "tp")
"""Dense mesh dims, slowest to fastest varying."""
EXPERT_MESH_DIMS = ("pp", "edp", "ep", "etp")
"""Expert mesh dims, slowest to fastest varying."""
GROUP_AXES = {
    "tp": "tp",
    "cp": "cp",
    "dp": "dp",
    "pp": "pp",
    "dp_cp": "dp-cp",
    "tp_cp": "tp-cp",
    "ep": "ep",
    "edp": "edp",
}
"""Group names of a context and the `RankLayout` axes each spans (plus ``embedding``)."""


def embedding_groups(layout: RankLayout) -> tuple[tuple[int, int], ...]:
    """(first stage, last stage) of every pipeline; empty without pipelining."""
    if layout.pp == 1:
        return ()
    return tuple((g[0], g[-1]) for g in layout.groups("pp"))


def fair_thread_count(local_world_size: int) -> int:
    """CPU threads per rank: the cores this process may use, shared evenly by the local
    ranks (oversubscribed gloo ranks run 4-8x slower, torch-distributed-on-cpu.md §7)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) // max(1, local_world_size))


@dataclass(frozen=True, kw_only=True, slots=True)
class ParallelContext:
    """Where this rank sits in the plan's grid, with its meshes and process groups."""

    plan: ParallelPlan
    """The plan whose degrees define the grid."""
    layout: RankLayout
    """The plan's rank layout (pure; shared with the cost model)."""
    rank: int
    """Global rank of this process."""
    device: torch.device
    """Device every tensor of this rank lives on."""
    mesh: DeviceMesh | None = None
    """Dense mesh, dims ``("pp", "dp", "cp", "tp")``; None in a single-process run."""
    expert_mesh: DeviceMesh | None = None
    """Expert mesh, dims ``("pp", "edp", "ep", "etp")``; None in a single-process run."""
    flat_meshes: Mapping[str, DeviceMesh] = field(default_factory=dict)
    """One-dim meshes of the flattened ``dp_cp`` and ``tp_cp`` groups."""
    groups: Mapping[str, dist.ProcessGroup] = field(default_factory=dict)
    """This rank's process group for each name of `GROUP_AXES` and ``embedding``."""

    @classmethod
    def single(
        cls, plan: ParallelPlan | None = None, *, device: torch.device | None = None
    ) -> ParallelContext:
        """A one-rank context that needs no process group (the reference and plain runs)."""
        plan = plan or ParallelPlan()
        if plan.world_size != 1:
            raise SpecError(
                f"ParallelContext.single needs a one-rank plan, got {plan.label()} "
                f"(world {plan.world_size}); use ParallelContext.create under torch.distributed"
            )
        return cls(
            plan=plan,
            layout=RankLayout.from_plan(plan),
            rank=0,
            device=device or torch.device("cpu"),
        )

    @classmethod
    def create(
        cls,
        plan: ParallelPlan,
        *,
        device: torch.device | None = None,
        local_world_size: int | None = None,
    ) -> ParallelContext:
        """Build the meshes and groups of ``plan`` on the initialized default process group.

        Collective: every rank must call it in the same order. On CPU it also sets this
        rank's thread count to its fair share of the cores (`fair_thread_count`), with the
        local world size taken from ``LOCAL_WORLD_SIZE`` when not given.
        """
        device = device or torch.device("cpu")
        if device.type == "cpu":
            local = local_world_size or int(os.environ.get("LOCAL_WORLD_SIZE", plan.world_size))
            torch.set_num_threads(fair_thread_count(local))
        if plan.world_size == 1 and not dist.is_initialized():
            return cls.single(plan, device=device)
        if not dist.is_initialized():
            raise SpecError(
                f"plan {plan.label()} needs {plan.world_size} ranks but torch.distributed is "
                "not initialized; call init_process_group first (or launch with torchrun)"
            )
        layout = RankLayout.from_plan(plan, world_size=dist.get_world_size())
        return cls._build_meshes(plan, layout, dist.get_rank(), device)

    @classmethod
    def _build_meshes(
        cls, plan: ParallelPlan, layout: RankLayout, rank: int, device: torch.device
    ) -> ParallelContext:
        sizes = {"pp": layout.pp, "dp": layout.dp, "cp": layout.cp, "tp": layout.tp}
        mesh = init_device_mesh(
            device.type, tuple(sizes[d] for d in DENSE_MESH_DIMS), mesh_dim_names=DENSE_MESH_DIMS
        )
        flat = {
            "dp_cp": mesh["dp", "cp"]._flatten("dp_cp"),
            "tp_cp": mesh["cp", "tp"]._flatten("tp_cp"),
        }
        expert_sizes = (layout.pp, layout.edp, layout.ep, layout.etp)
        grid = torch.arange(layout.world_size).view(*expert_sizes)
        expert_mesh = DeviceMesh(device.type, grid, mesh_dim_names=EXPERT_MESH_DIMS)
        groups = {axis: mesh.get_group(axis) for axis in ("tp", "cp", "dp", "pp")}
        groups |= {name: m.get_group() for name, m in flat.items()}
        groups |= {axis: expert_mesh.get_group(axis) for axis in ("ep", "edp")}
        for members in embedding_groups(layout):
            group = dist.new_group(list(members))
            if rank in members:
                groups["embedding"] = group
        return cls(
            plan=plan,
            layout=layout,
            rank=rank,
            device=device,
            mesh=mesh,
            expert_mesh=expert_mesh,
            flat_meshes=flat,
            groups=groups,
        )

    # ---- queries ---------------------------------------------------------------------

    @property
    def world_size(self) -> int:
        """Ranks in the job."""
        return self.layout.world_size

    @property
    def coords(self) -> dict[str, int]:
        """This rank's index on every axis of both grids (``tp``, ``cp``, ``dp``, ``pp``,
        ``etp``, ``ep``, ``edp``)."""
        c = self.layout.coordinates(self.rank)
        return {
            "tp": c.tp,
            "cp": c.cp,
            "dp": c.dp,
            "pp": c.pp,
            "etp": c.etp,
            "ep": c.ep,
            "edp": c.edp,
        }

    def size(self, name: str) -> int:
        """Ranks in this rank's group ``name`` (a key of `GROUP_AXES`, or ``embedding``)."""
        if name == "embedding":
            return 2 if self.layout.pp > 1 else 1
        if name not in GROUP_AXES:
            valid = ", ".join([*GROUP_AXES, "embedding"])
            raise SpecError(f"unknown group {name!r}; valid: {valid}")
        return self.layout.group_size(GROUP_AXES[name])

    def group(self, name: str) -> dist.ProcessGroup | None:
        """Process group ``name``, or None when it has a single rank."""
        if self.size(name) == 1:
            return None
        if name not in self.groups:
            raise SpecError(f"this context has no {name!r} group (plan {self.plan.label()})")
        return self.groups[name]

    def submesh(self, name: str) -> DeviceMesh:
        """One-dimensional mesh of group ``name`` (any key of `GROUP_AXES`)."""
        if self.mesh is None or self.expert_mesh is None:
            raise SpecError("a single-process context has no device mesh")
        if name in self.flat_meshes:
            return self.flat_meshes[name]
        if name in ("ep", "edp"):
            return self.expert_mesh[name]
        return self.mesh[name]
