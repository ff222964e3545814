"""Exact resume under every parallelism the executor runs on 2 ranks (the 2-rank parity
plans of `parity_cases`: TP with SP, PP 1F1B and interleaved, DDP, FSDP2, EP, CP).

Per plan, one run trains steps 0-3 and saves periodic checkpoints after steps 1 and 3;
a second run resumes from the first checkpoint and trains steps 2-3. Its losses must equal
the first run's, bitwise: model, optimizer, RNG and data position all came back.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from executor.checkpoint import step_folder
from executor.run import RunConfig, execute
from tests.executor.parity_cases import CASES_2

PLANS = ["tp2_sp", "pp2_1f1b", "pp2_interleaved", "dp2_ddp", "dp2_fsdp", "ep2_moe", "cp2"]
"""Each 2-rank parallelism once."""

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _ranks_can_import_this_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO))


@pytest.mark.slow
@pytest.mark.parametrize("name", PLANS)
def test_resume_repeats_the_uninterrupted_losses(name: str, tmp_path: Path) -> None:
    bundle = CASES_2[name].bundle()
    common = {"bundle": bundle, "warmup": 0, "profile_steps": 0, "timeout_s": 60.0}
    ckpt = tmp_path / "ckpt"
    whole = execute(
        RunConfig(
            out_dir=str(tmp_path / "a"), steps=4, save_dir=str(ckpt), save_interval=2, **common
        )
    )
    resumed = execute(
        RunConfig(
            out_dir=str(tmp_path / "b"), steps=2, resume_dir=str(step_folder(ckpt, 2)), **common
        )
    )
    assert whole is not None and resumed is not None
    assert resumed.loss == whole.loss[2:]  # bitwise
    assert resumed.next_step == whole.next_step == 4
