"""The command-line form of the fixes that rule messages and refusals phrase in spec fields.

A rule's fix names the field to change, ``set sequence_parallel=False or tp > 1``
(`specs.rules_base`, conventions for messages), which is what a user of the Python API
sets. A user of `paraplan check`, `estimate`, `plan` or `export` sets flags instead:
`FIX_FLAGS` maps each field a fix names to its flag and the way the flag takes the value,
`NO_FLAG` names the fields a fix may name that no flag sets, and `cli_fix` rewrites a
message with them: ``use --no-sp or tp > 1``; ``dp=8 (spec field, no flag: derived as
--num-gpus / (tp·pp·cp))``. Fragments rewritten: ``field=value`` (with a ``set`` before
it, ``use`` and the flag) and ``drop field``. Operands (``field (value)``) stay as they
are.

Standard library only, as `paraplan.flags`: `paraplan.cli` applies it to every error line.
"""

from __future__ import annotations

import re
from typing import Literal

FlagKind = Literal["switch", "presence", "value"]
"""How a flag sets its field: ``switch`` ``--flag`` for True and ``--no-flag`` for False in
`check`, `estimate` and `plan`; ``presence`` ``--flag`` for True, False by leaving the flag
out (`check` and `estimate` take no ``--no-`` form); ``value`` ``--flag VALUE``, None by
leaving the flag out."""

FIX_FLAGS: dict[str, tuple[str, FlagKind]] = {
    # ParallelPlan (paraplan.plan_args for check / estimate, paraplan.knob_args for plan)
    "tp": ("--tp", "value"),
    "pp": ("--pp", "value"),
    "vpp": ("--vpp", "value"),
    "cp": ("--cp", "value"),
    "ep": ("--ep", "value"),
    "etp": ("--etp", "value"),
    "micro_batch_size": ("--mbs", "value"),
    "sequence_parallel": ("--sp", "switch"),
    "recompute": ("--recompute", "value"),
    "recompute_num_layers": ("--recompute-num-layers", "value"),
    "recompute_method": ("--recompute-method", "value"),
    "recompute_modules": ("--recompute-modules", "value"),
    "cpu_offloading_num_layers": ("--cpu-offloading-num-layers", "value"),
    "offload_modules": ("--offload-modules", "value"),
    "distributed_optimizer": ("--dist-opt", "switch"),
    "use_megatron_fsdp": ("--use-megatron-fsdp", "presence"),
    "data_parallel_sharding_strategy": ("--data-parallel-sharding-strategy", "value"),
    "ddp_bucket_size": ("--bucket-size", "value"),
    "overlap_grad_reduce": ("--overlap-grad-reduce", "presence"),
    "overlap_param_gather": ("--overlap-param-gather", "presence"),
    "tp_comm_overlap": ("--tp-comm-overlap", "presence"),
    "decoder_first_pipeline_num_layers": ("--decoder-first-pipeline-num-layers", "value"),
    "decoder_last_pipeline_num_layers": ("--decoder-last-pipeline-num-layers", "value"),
    "account_for_embedding_in_pipeline_split": (
        "--account-for-embedding-in-pipeline-split",
        "presence",
    ),
    "account_for_loss_in_pipeline_split": ("--account-for-loss-in-pipeline-split", "presence"),
    "pipeline_model_parallel_layout": ("--pipeline-model-parallel-layout", "value"),
    # TrainingJob (paraplan.args)
    "precision": ("--precision", "value"),
    "optimizer": ("--optimizer", "value"),
    "seq_length": ("--seq-len", "value"),
    "global_batch_size": ("--global-batch", "value"),
    "packed_document_tokens": ("--packed-doc-len", "value"),
    # ExecutionOptions (paraplan.recipe_args, optimizer_args, time_args)
    "runtime": ("--runtime", "value"),
    "first_last_layers_bf16": ("--first-last-layers-bf16", "presence"),
    "cudnn_norm": ("--cudnn-norm", "presence"),
    "precision_aware_optimizer": ("--use-precision-aware-optimizer", "presence"),
}
"""Spec field -> (flag, kind) of the flag that sets it in `paraplan check`, `estimate` and
`plan` (`tests/paraplan/test_fix_flags.py` parses each form with those commands' parsers)."""

NO_FLAG: dict[str, str] = {
    "dp": "derived as --num-gpus / (tp·pp·cp)",
    "schedule": "derived: interleaved when --vpp > 1",
    "cp_comm_type": "`paraplan plan` chooses it",
    "layer_block": "a ModelSpec field: set it in a --model spec JSON",
    "num_experts": "a ModelSpec field: set it in a --model spec JSON",
    "param_gather_engine": "an ExecutionOptions field of the library only; the command line "
    "prices Megatron-FSDP",
}
"""Spec fields a fix may name that no flag sets -> how the command line fixes them; `cli_fix`
keeps the field text and adds ``(spec field, no flag: ...)``."""

_ASSIGNMENT = re.compile(
    r"(?P<set>\bset )?(?<![-\w.])(?P<field>[a-z_][a-z0-9_]*)="
    r"(?P<value>'[^']*'|\"[^\"]*\"|[^\s,;)]+)"
)
_DROP = re.compile(r"\bdrop (?P<field>[a-z_][a-z0-9_]*)\b(?!=)")
_SHELL_SAFE = re.compile(r"[\w.,+-]+")


def flag_form(field: str, value: str) -> str | None:
    """The command-line form of ``field=value`` (``value`` as a message writes it:
    ``True``, ``None``, ``4``, ``'full'``): ``--no-sp``, ``--recompute full``, ``drop
    --recompute-num-layers``; None when ``field`` has no flag in `FIX_FLAGS`."""
    if field not in FIX_FLAGS:
        return None
    flag, kind = FIX_FLAGS[field]
    if value == "None" or (kind == "presence" and value == "False"):
        return f"drop {flag}"
    if kind != "value":
        return flag if value == "True" else "--no-" + flag.removeprefix("--")
    text = value[1:-1] if value[:1] in "'\"" and value[-1:] == value[:1] else value
    return f"{flag} {text if _SHELL_SAFE.fullmatch(text) else repr(text)}"


def _assignment(match: re.Match[str]) -> str:
    field, value = match["field"], match["value"]
    form = flag_form(field, value)
    if form is not None:
        return form if form.startswith("drop ") or not match["set"] else f"use {form}"
    if field in NO_FLAG:
        return f"{match[0]} (spec field, no flag: {NO_FLAG[field]})"
    return match[0]


def _drop(match: re.Match[str]) -> str:
    field = match["field"]
    return f"drop {FIX_FLAGS[field][0]}" if field in FIX_FLAGS else match[0]


def cli_fix(message: str) -> str:
    """``message`` with each fix phrased in spec fields rewritten in the command line's flags
    (`FIX_FLAGS`); a field in `NO_FLAG` keeps its text with a note; other text is
    unchanged."""
    return _DROP.sub(_drop, _ASSIGNMENT.sub(_assignment, message))
