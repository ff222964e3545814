"""Checks before launch for `executor.run.execute`: every input a run needs, so bad input
fails with a one-line `SpecError` before any process starts.

Checked: the plan's rules; that it asks for no memory saver the executor lacks
(`specs.rules_savers.executor_saver_refusal`); steps, warmup, profiling and checkpoint
counts; that the machine can host the world (outside torchrun); the data source; a
checkpoint to resume (this plan, seed and data; the newest complete one of a folder,
`executor.checkpoint.latest_checkpoint`); the run folder and the checkpoint folder, created
and written to; free disk for one checkpoint (`executor.checkpoint.checkpoint_bytes`). An
earlier run's measurement in the run folder is removed (on rank 0 only under torchrun), so
that it is never read together with the new run's.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from executor.checkpoint import check_resumable, checkpoint_bytes
from executor.data import DataSource, resolve_data
from executor.launch import check_local_launch, under_torchrun
from executor.run_config import RunConfig
from executor.run_folder import clear_previous_run
from specs.errors import SpecError
from specs.kv_sharding import executor_kv_refusal
from specs.rules import require_valid_plan
from specs.rules_savers import executor_saver_refusal


@dataclass(frozen=True, kw_only=True, slots=True)
class Prepared:
    """What `prepare` checked and resolved."""

    source: DataSource
    """The validated data source."""
    config: RunConfig
    """The run's config with ``resume_dir`` resolved to the chosen checkpoint folder."""
    first_step: int
    """The step training starts at (the checkpoint's next step, else 0)."""
    replaced: tuple[str, ...] = ()
    """Files and folders of an earlier run in the run folder, removed
    (`executor.run_folder.clear_previous_run`)."""


def prepare(config: RunConfig) -> Prepared:
    """Every check that can run before launch (module doc, item 1); creates the run folder
    and the checkpoint folder."""
    b = config.bundle
    require_valid_plan(b.model, b.cluster, b.job, b.plan)
    refusal = executor_saver_refusal(b.plan) or executor_kv_refusal(
        b.model, b.plan.tp, "paraplan's executor"
    )
    if refusal is not None:
        raise SpecError(refusal)
    if config.steps < 1 or config.warmup < 0 or config.profile_steps < 0:
        raise SpecError(
            f"steps ({config.steps}) must be >= 1, warmup ({config.warmup}) and profile_steps "
            f"({config.profile_steps}) >= 0"
        )
    if config.host_probe is not None and config.steps <= config.profile_steps:
        raise SpecError(
            f"the host probe runs after unprofiled steps, and all {config.steps} measured steps "
            f"are profiled (profile_steps {config.profile_steps}); measure more steps"
        )
    for name, value in (("save_interval", config.save_interval), ("keep", config.keep)):
        if value is not None and value < 1:
            raise SpecError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if (config.save_interval or config.keep) and config.save_dir is None:
        raise SpecError("--save-interval and --keep need --save DIR, the checkpoint folder")
    if not under_torchrun(os.environ):
        check_local_launch(b.plan.world_size)
    source = resolve_data(config.data, vocab_size=b.model.vocab_size, seq_length=b.job.seq_length)
    first_step = 0
    if config.resume_dir is not None:
        meta = check_resumable(
            config.resume_dir, bundle=b, seed=config.seed, data=source.describe()
        )
        config = dataclasses.replace(config, resume_dir=meta["path"])
        first_step = int(meta["next_step"])
    writable_folder(config.out_dir, "--out")
    replaced: tuple[str, ...] = ()
    if int(os.environ.get("RANK", "0")) == 0:
        replaced = clear_previous_run(config.out_dir, b)
    if config.save_dir is not None:
        writable_folder(config.save_dir, "--save")
        check_free_disk(config.save_dir, checkpoint_bytes(b))
    return Prepared(source=source, config=config, first_step=first_step, replaced=replaced)


def writable_folder(path: str, flag: str) -> Path:
    """Create ``path`` as a folder (with its parents) and prove it takes a file; raise a
    one-line `SpecError` naming ``flag`` otherwise."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise SpecError(f"{flag} {folder}: exists and is not a folder; pass a folder path")
    probe = folder / ".paraplan-write-probe"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise SpecError(
            f"{flag} {folder}: not a writable folder ({exc.strerror or exc}); pass a folder "
            "on a writable file system"
        ) from None
    return folder


def check_free_disk(path: str, needed_bytes: int) -> None:
    """Raise `SpecError` unless the file system of ``path`` has ``needed_bytes`` free."""
    free = shutil.disk_usage(path).free
    if free < needed_bytes:
        raise SpecError(
            f"--save {path}: a checkpoint of this plan needs about {needed_bytes / 2**30:.2f} "
            f"GiB (fp32 weights and two AdamW moments) but {free / 2**30:.2f} GiB is free; "
            "free disk space or save to another disk"
        )
