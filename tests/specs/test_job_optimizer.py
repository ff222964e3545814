"""`TrainingJob.optimizer`: Megatron-LM's ``--optimizer`` names paraplan prices, refused
otherwise, and kept by the JSON round trip of a plan file."""

from __future__ import annotations

import pytest

from specs.errors import SpecError
from specs.job import TrainingJob
from specs.serde import dumps, loads


@pytest.mark.parametrize("optimizer", ["adam", "muon", "dist_muon"])
def test_optimizer_round_trips(optimizer: str) -> None:
    job = TrainingJob(seq_length=4096, global_batch_size=64, optimizer=optimizer)
    assert loads(TrainingJob, dumps(job)) == job


def test_unknown_optimizer_is_refused() -> None:
    with pytest.raises(SpecError, match="optimizer"):
        TrainingJob(seq_length=4096, global_batch_size=64, optimizer="sgd")


def test_default_is_adam() -> None:
    assert TrainingJob(seq_length=4096, global_batch_size=64).optimizer == "adam"
