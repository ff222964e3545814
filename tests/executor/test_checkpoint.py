"""Checkpoints: a resumed model continues exactly where the saved one was.

One spawned world (2 ranks, a toy DDP model with one rank-local "expert" weight) saves,
trains on as the reference, then rebuilds everything from another seed, loads and trains
the same steps: losses, weights and RNG draws must be identical. The metadata checks run
without spawning.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from executor.checkpoint import (
    META_FILE,
    check_resumable,
    checkpoint_bytes,
    checkpoint_meta,
    complete_checkpoints,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
    step_folder,
)
from executor.launch import RankInfo, launch
from executor.model import DecoderChunk
from specs import serde
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.params import padded_vocab_size
from specs.plan import ParallelPlan
from specs.presets import get_preset

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _ranks_can_import_this_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO))


class _Toy(nn.Module):
    """A bigram LM plus a per-rank "expert" scale that differs between ranks."""

    def __init__(self, seed: int, rank: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.table = nn.Embedding(16, 16)
        self.experts = nn.Module()
        self.experts.scale = nn.Parameter(torch.full((4,), 1.0 + rank))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.table(tokens) * self.experts.scale.mean()


def _build(seed: int, rank: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    model = _Toy(seed, rank)
    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, ["experts.scale"])
    ddp = DistributedDataParallel(model)
    return ddp, torch.optim.AdamW(ddp.parameters(), lr=0.05)


def _step(model: nn.Module, opt: torch.optim.Optimizer, step: int, rank: int) -> float:
    gen = torch.Generator().manual_seed(100 * step + rank)
    tokens = torch.randint(0, 16, (4, 9), generator=gen)
    noise = torch.rand(()) * 1e-3  # draws from the global RNG, which the checkpoint restores
    logits = model(tokens[:, :-1])
    loss = nn.functional.cross_entropy(logits.reshape(-1, 16), tokens[:, 1:].ravel()) + noise
    opt.zero_grad()
    loss.backward()
    opt.step()
    value = loss.detach().clone()
    dist.all_reduce(value)
    return value.item()


def _is_expert(key: str) -> bool:
    return ".experts." in key


def _save_then_resume(info: RankInfo, directory: str) -> dict[str, object]:
    rank = info.rank
    model, opt = _build(seed=0, rank=rank)
    for step in range(2):
        _step(model, opt, step, rank)
    parts = {"stage0": model}
    save_checkpoint(
        directory,
        parts=parts,
        optimizer=opt,
        next_step=2,
        meta={"seed": 0, "data": "synthetic", "plan": {}},
        local_keys=_is_expert,
        local_tag=f"ep{rank}",
    )
    reference = [_step(model, opt, step, rank) for step in (2, 3)]
    ref_state = {k: v.detach().clone() for k, v in model.state_dict().items()}

    fresh, fresh_opt = _build(seed=123, rank=1 - rank)  # other weights, other expert scale
    next_step = load_checkpoint(
        directory,
        parts={"stage0": fresh},
        optimizer=fresh_opt,
        local_keys=_is_expert,
        local_tag=f"ep{rank}",
    )
    resumed = [_step(fresh, fresh_opt, step, rank) for step in (next_step, next_step + 1)]
    same = all(torch.equal(ref_state[k], v) for k, v in fresh.state_dict().items())
    return {"next_step": next_step, "reference": reference, "resumed": resumed, "same": same}


@pytest.mark.slow
def test_resumed_training_repeats_the_uninterrupted_losses(tmp_path: Path) -> None:
    results = launch(_save_then_resume, (str(tmp_path / "ckpt"),), world_size=2, timeout_s=60)
    for result in results.values():
        assert result["next_step"] == 2
        assert result["resumed"] == result["reference"]  # bitwise: same order of every sum
        assert result["same"]
    assert results[0]["reference"] == results[1]["reference"]
    meta = json.loads((tmp_path / "ckpt" / META_FILE).read_text())
    assert meta["next_step"] == 2 and meta["seed"] == 0
    assert (tmp_path / "ckpt" / ".metadata").is_file()


# ---- metadata checks (no processes) --------------------------------------------------------


def _bundle(tp: int = 1) -> PlanBundle:
    return PlanBundle(
        model=get_preset("tiny"),
        cluster=ClusterSpec(hardware="cpu", num_gpus=2),
        job=TrainingJob(seq_length=64, global_batch_size=8, precision="fp32"),
        plan=ParallelPlan(tp=tp, dp=2 // tp),
    )


def _write_meta(directory: Path, bundle: PlanBundle, seed: int = 0) -> None:
    directory.mkdir()
    meta = checkpoint_meta(bundle=bundle, seed=seed, data="synthetic") | {"next_step": 6}
    (directory / META_FILE).write_text(json.dumps(meta))


def test_matching_checkpoint_is_resumable(tmp_path: Path) -> None:
    _write_meta(tmp_path / "c", _bundle())
    meta = check_resumable(tmp_path / "c", bundle=_bundle(), seed=0, data="synthetic")
    assert meta["next_step"] == 6
    assert serde.from_dict(PlanBundle, meta["plan"]) == _bundle()


def test_resume_ignores_the_pricing_options_of_the_plan_file(tmp_path: Path) -> None:
    # a checkpoint saved from a plan file without execution options (or other ones)
    # resumes under the same plan: training does not read them
    _write_meta(tmp_path / "c", _bundle())
    priced = dataclasses.replace(_bundle(), execution={"fp8_recipe": "tensorwise"})
    meta = check_resumable(tmp_path / "c", bundle=priced, seed=0, data="synthetic")
    assert meta["next_step"] == 6


def test_resume_refuses_another_plan_seed_or_data(tmp_path: Path) -> None:
    _write_meta(tmp_path / "c", _bundle())
    with pytest.raises(SpecError, match="saved with plan 'tp1 pp1 dp2 mbs1'"):
        check_resumable(tmp_path / "c", bundle=_bundle(tp=2), seed=0, data="synthetic")
    with pytest.raises(SpecError, match="saved with seed 0, this run has 5"):
        check_resumable(tmp_path / "c", bundle=_bundle(), seed=5, data="synthetic")
    with pytest.raises(SpecError, match="pass the same --data"):
        check_resumable(tmp_path / "c", bundle=_bundle(), seed=0, data="text:x.txt")


def test_resume_from_a_folder_without_checkpoint_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no complete checkpoint there"):
        check_resumable(tmp_path, bundle=_bundle(), seed=0, data="synthetic")
    (tmp_path / META_FILE).write_text("[1, 2]")
    with pytest.raises(SpecError, match="malformed checkpoint metadata"):
        check_resumable(tmp_path, bundle=_bundle(), seed=0, data="synthetic")


def test_newest_complete_checkpoint_is_taken_and_partial_ones_ignored(tmp_path: Path) -> None:
    for step in (4, 8, 12):
        _write_meta(step_folder(tmp_path, step), _bundle())
    # A save that crashed: its files under the partial name, and a step folder without META.
    (tmp_path / ".partial-step_00000016").mkdir()
    (tmp_path / ".partial-step_00000016" / META_FILE).write_text("{}")
    step_folder(tmp_path, 20).mkdir()
    assert [p.name for p in complete_checkpoints(tmp_path)] == [
        "step_00000004",
        "step_00000008",
        "step_00000012",
    ]
    assert latest_checkpoint(tmp_path) == step_folder(tmp_path, 12)
    meta = check_resumable(tmp_path, bundle=_bundle(), seed=0, data="synthetic")
    assert meta["path"] == str(step_folder(tmp_path, 12))
    # A checkpoint folder itself is its own latest.
    assert latest_checkpoint(step_folder(tmp_path, 4)) == step_folder(tmp_path, 4)
    assert latest_checkpoint(tmp_path / "absent") is None


@pytest.mark.parametrize(("tp", "vocab"), [(1, 512), (2, 500)])
def test_checkpoint_size_counts_every_parameter_of_the_live_model(tp: int, vocab: int) -> None:
    b = _bundle(tp=tp)
    b = dataclasses.replace(b, model=dataclasses.replace(b.model, vocab_size=vocab))
    model = b.model
    with torch.device("meta"):
        whole = DecoderChunk(
            model,
            layer_ids=range(model.num_layers),
            first=True,
            last=True,
            vocab=padded_vocab_size(model.vocab_size, tp),
        )
    numel = sum(p.numel() for p in whole.parameters())
    # fp32 weight + AdamW's exp_avg and exp_avg_sq, 4 bytes each
    assert checkpoint_bytes(b) == 12 * numel
