"""`TrainingJob.packed_document_tokens`: its checks, the attention span it sets and its JSON
form."""

from __future__ import annotations

import pytest

from specs.errors import SpecError
from specs.job import TrainingJob
from specs.serde import dumps, from_dict, loads


def test_unpacked_by_default_and_the_span_is_the_sequence() -> None:
    job = TrainingJob(seq_length=8192, global_batch_size=4)
    assert job.packed_document_tokens is None
    assert job.attention_span_tokens == 8192


def test_the_span_is_the_document_and_the_tokens_stay_the_sequence() -> None:
    job = TrainingJob(seq_length=8192, global_batch_size=4, packed_document_tokens=2048)
    assert job.attention_span_tokens == 2048
    assert job.tokens_per_iteration == 4 * 8192


@pytest.mark.parametrize("doc", [0, -1])
def test_a_document_needs_a_token(doc: int) -> None:
    with pytest.raises(
        SpecError, match=rf"packed_document_tokens must be a positive integer, got {doc}"
    ):
        TrainingJob(seq_length=8192, global_batch_size=4, packed_document_tokens=doc)


def test_a_document_fits_in_its_sequence() -> None:
    TrainingJob(seq_length=8192, global_batch_size=4, packed_document_tokens=8192)
    with pytest.raises(SpecError) as err:
        TrainingJob(seq_length=8192, global_batch_size=4, packed_document_tokens=8193)
    message = str(err.value)
    assert "[packed_document_tokens]" in message
    assert "(8193) exceeds seq_length (8192)" in message
    assert "<= seq_length" in message


def test_json_round_trip_and_an_older_job_without_the_key() -> None:
    job = TrainingJob(seq_length=8192, global_batch_size=4, packed_document_tokens=1024)
    assert loads(TrainingJob, dumps(job)) == job
    old = from_dict(TrainingJob, {"seq_length": 8192, "global_batch_size": 4})
    assert old.packed_document_tokens is None
    with pytest.raises(SpecError, match="exceeds seq_length"):
        from_dict(
            TrainingJob,
            {"seq_length": 1024, "global_batch_size": 4, "packed_document_tokens": 2048},
        )
