"""The line `paraplan estimate` and `paraplan plan` print for a job of packed sequences
(`specs.job.TrainingJob.packed_document_tokens`): what the attention core is priced over and
which FLOP count MFU uses."""

from __future__ import annotations

from specs.job import TrainingJob

PACKED_MFU_CONVENTION = (
    "attention per packed document (Megatron-Bridge flop_utils core_attn_seq_factor = "
    "sum(L_i^2)/sum(L_i)); Megatron-LM's num_floating_point_operations counts the whole "
    "sequence"
)
"""The FLOP convention MFU follows under packing, as the output names it."""


def packing_line(job: TrainingJob) -> str | None:
    """One line naming the packing, the attention span the core is priced over and the
    FLOP convention of MFU; None for an unpacked job."""
    doc = job.packed_document_tokens
    if doc is None:
        return None
    per_sequence = job.seq_length / doc
    return (
        f"packed sequences: documents of {doc} tokens in {job.seq_length}-token sequences "
        f"({per_sequence:g} per sequence); the attention core runs causally per document; "
        f"MFU counts {PACKED_MFU_CONVENTION}"
    )


def packing_json(job: TrainingJob) -> dict[str, object]:
    """The ``packing`` key of ``--json`` output for a packed job; empty for an unpacked one,
    so unpacked output keeps its keys."""
    if job.packed_document_tokens is None:
        return {}
    return {
        "packing": {
            "packed_document_tokens": job.packed_document_tokens,
            "documents_per_sequence": job.seq_length / job.packed_document_tokens,
            "mfu_convention": PACKED_MFU_CONVENTION,
        }
    }
