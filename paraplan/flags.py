"""The command-line flag behind each spec field, so that an out-of-range value is reported
with the flag the user typed (``--seq-len (TrainingJob.seq_length) must be a positive
integer, got 0``) instead of only the spec field.

Imports nothing beyond the standard library: `paraplan.cli` uses it for every error line and
stays light for ``--help`` and input errors.
"""

from __future__ import annotations

import argparse

FIELD_DESTS: dict[str, str] = {
    "TrainingJob.seq_length": "seq_len",
    "TrainingJob.global_batch_size": "global_batch",
    "TrainingJob.packed_document_tokens": "packed_doc_len",
    "ClusterSpec.num_gpus": "num_gpus",
    "ClusterSpec.gpus_per_node": "gpus_per_node",
    "ClusterSpec.nvlink_segment_nodes": "nvlink_segment_nodes",
    "ParallelPlan.tp": "tp",
    "ParallelPlan.pp": "pp",
    "ParallelPlan.vpp": "vpp",
    "ParallelPlan.cp": "cp",
    "ParallelPlan.ep": "ep",
    "ParallelPlan.etp": "etp",
    "ParallelPlan.micro_batch_size": "mbs",
    "ParallelPlan.recompute_num_layers": "recompute_num_layers",
    "ParallelPlan.ddp_bucket_size": "bucket_size",
    "ParallelPlan.cpu_offloading_num_layers": "cpu_offloading_num_layers",
    "ParallelPlan.recompute_modules": "recompute_modules",
    "ParallelPlan.offload_modules": "offload_modules",
    "ParallelPlan.decoder_first_pipeline_num_layers": "decoder_first_pipeline_num_layers",
    "ParallelPlan.decoder_last_pipeline_num_layers": "decoder_last_pipeline_num_layers",
    "ParallelPlan.pipeline_model_parallel_layout": "pipeline_model_parallel_layout",
    "SearchSpace.max_micro_batch_size": "max_mbs",
    "SearchPace.time_limit_s": "time_limit",
}
"""Spec field (``Class.field``, as `SpecError` messages name it) -> argparse dest of the flag
that sets it in `check`, `estimate` and `plan`."""


def name_flags(message: str, args: argparse.Namespace) -> str:
    """``message`` with every spec field that a flag of this command set prefixed by that
    flag; fields the command read from a file (`export`, `execute`) stay as they are."""
    for field, dest in FIELD_DESTS.items():
        if field in message and getattr(args, dest, None) is not None:
            flag = "--" + dest.replace("_", "-")
            message = message.replace(field, f"{flag} ({field})", 1)
    return message


MEGATRON_SPELLINGS: dict[str, str] = {
    "--seq-len": "--seq-length",
    "--global-batch": "--global-batch-size",
    "--tp": "--tensor-model-parallel-size",
    "--pp": "--pipeline-model-parallel-size",
    "--vpp": "--num-virtual-stages-per-pipeline-rank",
    "--cp": "--context-parallel-size",
    "--ep": "--expert-model-parallel-size",
    "--etp": "--expert-tensor-parallel-size",
    "--mbs": "--micro-batch-size",
    "--sp": "--sequence-parallel",
    "--dist-opt": "--use-distributed-optimizer",
    "--bucket-size": "--ddp-bucket-size",
    "--recompute": "--recompute-granularity",
}
"""paraplan's short flag -> the Megatron-LM argument of the same meaning
(`megatron/training/arguments.py`), accepted as an alias by `check`, `estimate` and `plan`
so that a Megatron launch line's parallel arguments can be pasted as they are."""


def spellings(flag: str) -> tuple[str, ...]:
    """``flag`` and, when it has one, its Megatron-LM alias (`MEGATRON_SPELLINGS`)."""
    alias = MEGATRON_SPELLINGS.get(flag)
    return (flag,) if alias is None else (flag, alias)
