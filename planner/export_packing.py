"""What a Megatron-LM export says of a job of packed sequences
(`specs.job.TrainingJob.packed_document_tokens`): the dataloader flag and the command
comment on the data."""

from __future__ import annotations

from specs.job import TrainingJob
from specs.plan import ParallelPlan


def packing_arguments(job: TrainingJob) -> list[str]:
    """``--dataloader-inter-document-masking`` for a job of packed sequences: Megatron-LM's
    GPT dataset then returns ``cu_seqlens`` at the document boundaries of each sample
    (`GPTDatasetConfig.inter_document_masking`, ``megatron/core/datasets/gpt_dataset.py``)
    and the step attends per document in the THD layout (``PackedSeqParams``); empty for an
    unpacked job. The length of the documents is the data's (`packing_note`)."""
    if job.packed_document_tokens is None:
        return []
    return ["--dataloader-inter-document-masking"]


def packing_note(job: TrainingJob, plan: ParallelPlan) -> str | None:
    """The command comment of a packed job: the document length the plan was priced with,
    which the data must supply (Megatron-Bridge: ``PackedSequenceSpecs.packed_sequence_size``
    = seq_length with documents of about that length; ``--sft`` data packs always), and the
    per-document padding context parallelism needs; None for an unpacked job."""
    doc = job.packed_document_tokens
    if doc is None:
        return None
    note = (
        f"packed sequences priced with documents of {doc} tokens (sum(L^2)/sum(L)) in "
        f"{job.seq_length}-token sequences: the data must pack documents of that length"
    )
    if plan.cp > 1:
        note += f", each padded to a multiple of 2*cp = {2 * plan.cp}"
    return note
