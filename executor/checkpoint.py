"""Save and resume training with `torch.distributed.checkpoint` (DCP).

A checkpoint folder holds DCP's files (``.metadata`` and one ``.distcp`` shard file per
rank) plus `META_FILE`, a small JSON written by rank 0 that says what was saved: the next
step, the seed, the data source and the plan bundle. The parent reads it before launching a
resumed run (`check_resumable`), so a checkpoint of another plan or stream is refused before
any rank starts.

The DCP state dict::

    model.<part>.<fqn>          parameters and buffers of each model part (DTensor shards
                                under TP/FSDP; DDP's ``module.`` prefix is removed by
                                `get_state_dict`)
    optim.state.<part>.<fqn>.*  optimizer state, flattened by parameter name so each shard
                                is keyed by the parameter it belongs to
    optim.param_groups.<part>.<fqn>.*
    progress.next_step          the first step a resumed run trains (a replicated scalar)
    rng.cpu.rank<r>             each rank's torch CPU generator state
    rng.cuda.rank<r>            each rank's current CUDA generator state, when on CUDA
    local.<tag>.model/optim.*   entries that differ between ranks holding the same name
                                (routed experts: tag ``ep<i>``), kept apart per tag

Parts are named by the caller with names that identify the same weights on every rank
and in every run of the plan (for pipelines: the virtual stage index), because DCP treats
equal keys on different ranks as copies of one tensor. The data position is the step
number alone: every stream is a pure function of the sample index (`executor.data`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)

from specs import serde
from specs.bundle import PlanBundle
from specs.errors import SpecError

META_FILE = "paraplan_checkpoint.json"
"""What the checkpoint holds, for checks before launch."""
_OPTIONS = StateDictOptions(flatten_optimizer_state_dict=True)


LocalKeys = Callable[[str], bool]
"""Predicate on a state-dict key: True when this rank's tensor under that key differs from
the other ranks' copies (routed experts under expert parallelism)."""


def save_checkpoint(
    directory: str | Path,
    *,
    parts: Mapping[str, nn.Module],
    optimizer: torch.optim.Optimizer,
    next_step: int,
    meta: Mapping[str, Any],
    local_keys: LocalKeys | None = None,
    local_tag: str = "",
) -> None:
    """Save model, optimizer, RNG and data position; collective over all ranks.

    Keys matched by ``local_keys`` are stored under ``local.<local_tag>.`` so that ranks
    holding different tensors under one name (experts of another EP rank) do not collide;
    ranks with the same tag hold (shards of) the same tensors.
    """
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    state, _ = _state(parts, optimizer, next_step, local_keys, local_tag)
    dcp.save(state, checkpoint_id=str(path))
    if _rank() == 0:
        (path / META_FILE).write_text(json.dumps(dict(meta) | {"next_step": next_step}, indent=2))
    if dist.is_initialized():
        dist.barrier()


def load_checkpoint(
    directory: str | Path,
    *,
    parts: Mapping[str, nn.Module],
    optimizer: torch.optim.Optimizer,
    local_keys: LocalKeys | None = None,
    local_tag: str = "",
) -> int:
    """Load what `save_checkpoint` wrote into the live model and optimizer, restore this
    rank's RNG state, and return the next step to train; collective over all ranks."""
    state, container = _state(parts, optimizer, 0, local_keys, local_tag)
    dcp.load(state, checkpoint_id=str(directory))
    own = state["local"][local_tag] if local_keys is not None else {"model": {}, "optim": {}}
    set_state_dict(
        container,
        optimizer,
        model_state_dict=state["model"] | own["model"],
        optim_state_dict=state["optim"] | own["optim"],
        options=_OPTIONS,
    )
    _restore_rng(state["rng"], _rank())
    return int(state["progress"]["next_step"])


def _state(
    parts: Mapping[str, nn.Module],
    optimizer: torch.optim.Optimizer,
    next_step: int,
    local_keys: LocalKeys | None,
    local_tag: str,
) -> tuple[dict[str, Any], nn.Module]:
    """The DCP state dict of the module doc, over the live tensors."""
    container = nn.ModuleDict(dict(parts))
    model_sd, optim_sd = get_state_dict(container, optimizer, options=_OPTIONS)
    state: dict[str, Any] = {
        "model": model_sd,
        "optim": optim_sd,
        "progress": {"next_step": torch.tensor(next_step, dtype=torch.int64)},
        "rng": _rng_state(_rank()),
    }
    if local_keys is not None:
        state["model"] = {k: v for k, v in model_sd.items() if not local_keys(k)}
        state["optim"] = {k: v for k, v in optim_sd.items() if not local_keys(k)}
        state["local"] = {
            local_tag: {
                "model": {k: v for k, v in model_sd.items() if local_keys(k)},
                "optim": {k: v for k, v in optim_sd.items() if local_keys(k)},
            }
        }
    return state, container


def check_resumable(
    directory: str | Path, *, bundle: PlanBundle, seed: int, data: str
) -> dict[str, Any]:
    """Read `META_FILE` and check it matches this run; raise `SpecError` with the fix if not.

    Returns the saved metadata (``next_step``, ``seed``, ``data``, ``plan``).
    """
    path = Path(directory)
    meta_path = path / META_FILE
    if not meta_path.is_file():
        raise SpecError(
            f"--resume {path}: no checkpoint there ({META_FILE} is missing); pass a folder "
            "written by `paraplan execute ... --save DIR`"
        )
    meta = serde.read_json(meta_path)
    if not isinstance(meta, dict) or not {"next_step", "seed", "data", "plan"} <= meta.keys():
        raise SpecError(f"{meta_path}: malformed checkpoint metadata; save the checkpoint again")
    saved = serde.from_dict(PlanBundle, meta["plan"], where=str(meta_path))
    if saved != bundle:
        raise SpecError(
            f"--resume {path}: the checkpoint was saved with plan {saved.plan.label()!r} of "
            f"model {saved.model.name!r}, not this plan ({bundle.plan.label()!r} of "
            f"{bundle.model.name!r}); resume with the plan file it was saved with"
        )
    for key, value in (("seed", seed), ("data", data)):
        if meta[key] != value:
            raise SpecError(
                f"--resume {path}: the checkpoint was saved with {key} {meta[key]!r}, this run "
                f"has {value!r}; pass the same --{key} to continue the same stream"
            )
    return meta


def checkpoint_meta(*, bundle: PlanBundle, seed: int, data: str) -> dict[str, Any]:
    """The metadata `save_checkpoint` stores next to the tensors."""
    return {"seed": seed, "data": data, "plan": serde.to_dict(bundle)}


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _rng_state(rank: int) -> dict[str, torch.Tensor]:
    state = {f"cpu.rank{rank}": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state[f"cuda.rank{rank}"] = torch.cuda.get_rng_state()
    return state


def _restore_rng(state: Mapping[str, torch.Tensor], rank: int) -> None:
    torch.set_rng_state(state[f"cpu.rank{rank}"])
    if f"cuda.rank{rank}" in state:
        torch.cuda.set_rng_state(state[f"cuda.rank{rank}"])
