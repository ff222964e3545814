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

Periodic checkpoints (`save_step_checkpoint`) live in a root folder as ``step_<next step>``
subfolders. Each is written under a hidden ``.partial-step_<n>`` name and renamed when
complete (a rename within one file system is atomic), so a crash during a save leaves only
a partial folder that `latest_checkpoint` ignores, and the previous checkpoint stays usable;
only the newest ``keep`` complete ones are kept.

Parts are named by the caller with names that identify the same weights on every rank
and in every run of the plan (for pipelines: the virtual stage index), because DCP treats
equal keys on different ranks as copies of one tensor. The data position is the step
number alone: every stream is a pure function of the sample index (`executor.data`).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
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
from specs.params import count_params, padded_vocab_size

META_FILE = "paraplan_checkpoint.json"
"""What the checkpoint holds, for checks before launch."""
STEP_PREFIX = "step_"
"""Name of a complete periodic checkpoint: ``step_`` and its next step, 8 digits."""
PARTIAL_PREFIX = ".partial-"
"""Prefix of a periodic checkpoint still being written."""
STATE_BYTES_PER_PARAMETER = 12
"""Checkpointed bytes per parameter: the fp32 weight (`executor.precision`: parameters stay
fp32 in every mode) and AdamW's two fp32 moments (torch.optim.AdamW ``exp_avg``,
``exp_avg_sq``)."""
_STEP_NAME = re.compile(r"step_(\d+)")
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

    ``directory`` is a checkpoint or a folder of periodic ones (`latest_checkpoint`).
    Returns the saved metadata (``next_step``, ``seed``, ``data``, ``plan``) and ``path``,
    the checkpoint folder chosen.
    """
    given = Path(directory)
    if not given.is_dir():
        raise SpecError(
            f"--resume {given}: not a folder; pass the DIR of `paraplan execute ... --save DIR`"
        )
    path = latest_checkpoint(given)
    if path is None:
        raise SpecError(
            f"--resume {given}: no complete checkpoint there ({META_FILE} is missing, and "
            f"no {STEP_PREFIX}* folder holds one); pass a folder written by "
            "`paraplan execute ... --save DIR`"
        )
    meta_path = path / META_FILE
    meta = serde.read_json(meta_path)
    if not isinstance(meta, dict) or not {"next_step", "seed", "data", "plan"} <= meta.keys():
        raise SpecError(f"{meta_path}: malformed checkpoint metadata; save the checkpoint again")
    saved = serde.from_dict(PlanBundle, meta["plan"], where=str(meta_path))
    # the execution options record how the plan was priced; training does not read them
    if dataclasses.replace(saved, execution={}) != dataclasses.replace(bundle, execution={}):
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
    return meta | {"path": str(path)}


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


def step_folder(root: str | Path, next_step: int) -> Path:
    """Folder of the periodic checkpoint whose next step is ``next_step``."""
    return Path(root) / f"{STEP_PREFIX}{next_step:08d}"


def save_step_checkpoint(
    root: str | Path,
    *,
    keep: int,
    parts: Mapping[str, nn.Module],
    optimizer: torch.optim.Optimizer,
    next_step: int,
    meta: Mapping[str, Any],
    local_keys: LocalKeys | None = None,
    local_tag: str = "",
) -> Path:
    """`save_checkpoint` into `step_folder`, atomically (module doc), then delete all but
    the newest ``keep`` complete checkpoints; collective over all ranks. Returns the folder.
    """
    final = step_folder(root, next_step)
    partial = final.with_name(PARTIAL_PREFIX + final.name)
    if _rank() == 0:
        shutil.rmtree(partial, ignore_errors=True)  # left by a crash during an earlier save
    if dist.is_initialized():
        dist.barrier()
    save_checkpoint(
        partial,
        parts=parts,
        optimizer=optimizer,
        next_step=next_step,
        meta=meta,
        local_keys=local_keys,
        local_tag=local_tag,
    )
    if _rank() == 0:
        if final.exists():
            shutil.rmtree(final)
        partial.rename(final)
        for old in complete_checkpoints(root)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    if dist.is_initialized():
        dist.barrier()
    return final


def complete_checkpoints(root: str | Path) -> list[Path]:
    """The complete periodic checkpoints under ``root``, oldest first."""
    path = Path(root)
    if not path.is_dir():
        return []
    found = [
        (int(m.group(1)), child)
        for child in path.iterdir()
        if (m := _STEP_NAME.fullmatch(child.name)) and (child / META_FILE).is_file()
    ]
    return [child for _, child in sorted(found)]


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The checkpoint ``--resume DIR`` means: DIR itself when it is one (it holds
    `META_FILE`), else its newest complete ``step_*`` checkpoint; None when there is none."""
    path = Path(directory)
    if (path / META_FILE).is_file():
        return path
    complete = complete_checkpoints(path)
    return complete[-1] if complete else None


def checkpoint_bytes(bundle: PlanBundle) -> int:
    """Estimated bytes of one checkpoint of ``bundle`` over all ranks: every parameter of
    the model (`specs.params.count_params`, with the embedding and output rows of the
    vocabulary padded for tp, `specs.params.padded_vocab_size`) at
    `STATE_BYTES_PER_PARAMETER`."""
    model = bundle.model
    padding = padded_vocab_size(model.vocab_size, bundle.plan.tp) - model.vocab_size
    tables = 1 if model.tied_embeddings else 2
    params = count_params(model).total + padding * model.hidden_size * tables
    return params * STATE_BYTES_PER_PARAMETER
