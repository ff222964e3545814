"""`paraplan.fix_flags`: every ``field=`` a spec or cost-model message can give maps to a
flag the command line really has (parsed here with the parsers of `check`, `estimate` and
`plan`), or is listed as having none; and the rewrite of a message."""

from __future__ import annotations

import argparse
import ast
import re
import shlex
from pathlib import Path

import pytest

from paraplan.cli import command_module
from paraplan.fix_flags import FIX_FLAGS, NO_FLAG, cli_fix, flag_form
from specs import ClusterSpec, TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from specs.rules import check_plan

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("specs", "costmodel")
"""Packages whose messages (`SpecError`, rule violations) the command line prints."""

FIELD_FRAGMENT = re.compile(r"(?<![-\w.`])([a-z_][a-z0-9_]*)=(?!=)")
CALL = re.compile(r"\b\w+\([^()]*\)")
"""A Python call written in a message (``LoraSpec(rank=...)``): keyword arguments of the
API, not a fix."""

LABEL_TAGS = {"layout", "rc", "offload"}
"""``ParallelPlan.label`` tags (`specs/plan.py`: ``layout=...``, ``rc=...``,
``offload=...``), which name a plan and give no fix."""

SAMPLE_VALUES = {
    "recompute": "'full'",
    "recompute_method": "'block'",
    "recompute_modules": "'core_attn,mlp'",
    "offload_modules": "'core_attn'",
    "data_parallel_sharding_strategy": "'optim'",
    "pipeline_model_parallel_layout": "'Et|tt|tL'",
    "precision": "'fp8'",
    "optimizer": "'muon'",
    "runtime": "'torch'",
}
"""A valid value, as a message writes it, of each string field of `FIX_FLAGS`; an integer
field takes 2."""

BASE = ["--model", "tiny", "--num-gpus", "8", "--seq-len", "512", "--global-batch", "8"]


def message_fields() -> set[str]:
    """Every ``field`` of a ``field=`` fragment in the string constants (docstrings left
    out) of `SCANNED`: the fixes their messages can give."""
    fields: set[str] = set()
    for path in (p for package in SCANNED for p in (ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        }
        for node in ast.walk(tree):
            text = node.value if isinstance(node, ast.Constant) else None
            if isinstance(text, str) and id(node) not in docstrings:
                fields |= set(FIELD_FRAGMENT.findall(CALL.sub("", text)))
    return fields - LABEL_TAGS


def parsed(command: str, *argv: str) -> dict[str, object]:
    """The namespace of ``paraplan COMMAND`` with `BASE` and ``argv``, as a dict; the
    command's own flags (`paraplan.cli.command_module`), whole: no abbreviation is taken,
    so a table entry that is only the prefix of a flag fails."""
    parser = argparse.ArgumentParser(prog=f"paraplan {command}", allow_abbrev=False)
    command_module(command).add_arguments(parser)
    return vars(parser.parse_args([*BASE, *argv]))


def changed(command: str, argv: list[str]) -> dict[str, object]:
    """The destinations ``argv`` sets differently from `BASE` alone."""
    before, after = parsed(command), parsed(command, *argv)
    return {k: v for k, v in after.items() if before.get(k) != v}


def test_every_field_a_message_sets_has_a_flag_or_is_listed_without_one() -> None:
    fields = message_fields()
    # the fixes of the rules in specs/rules_features.py and specs/rules.py are among them
    assert {"sequence_parallel", "tp_comm_overlap", "distributed_optimizer", "dp"} <= fields
    unmapped = sorted(f for f in fields if f not in FIX_FLAGS and f not in NO_FLAG)
    assert not unmapped, f"add these fields to FIX_FLAGS or NO_FLAG: {unmapped}"
    assert not set(FIX_FLAGS) & set(NO_FLAG)


@pytest.mark.parametrize("command", ["estimate", "plan"])
@pytest.mark.parametrize("field", sorted(FIX_FLAGS))
def test_each_flag_form_parses_and_sets_its_value(command: str, field: str) -> None:
    flag, kind = FIX_FLAGS[field]
    if kind == "value":
        value = SAMPLE_VALUES.get(field, "2")
        argv = shlex.split(flag_form(field, value) or "")
        assert argv[0] == flag
        assert [str(v) for v in changed(command, argv).values()] == [value.strip("'")]
        return
    on = shlex.split(flag_form(field, "True") or "")
    assert on == [flag] and list(changed(command, on).values()) == [True]
    off = flag_form(field, "False") or ""
    if kind == "switch":  # --no-FLAG parses and reads False
        assert parsed(command, *shlex.split(off))[next(iter(changed(command, on)))] is False
    else:  # off is the flag left out
        assert off == f"drop {flag}"


EXECUTION_FIELDS = {"runtime", "first_last_layers_bf16", "cudnn_norm", "precision_aware_optimizer"}
"""`ExecutionOptions` fields of `FIX_FLAGS`: flags of `estimate` and `plan`, which price;
`check` takes only the plan and job flags."""


@pytest.mark.parametrize("field", sorted(set(FIX_FLAGS) - EXECUTION_FIELDS))
def test_check_takes_the_plan_and_job_flags_too(field: str) -> None:
    value = "True" if FIX_FLAGS[field][1] != "value" else SAMPLE_VALUES.get(field, "2")
    assert changed("check", shlex.split(flag_form(field, value) or ""))


def test_the_rewrite_of_each_kind_of_fix() -> None:
    assert cli_fix("got tp (1): set sequence_parallel=False or tp > 1") == (
        "got tp (1): use --no-sp or tp > 1"
    )
    assert cli_fix("set recompute='full' or recompute_num_layers=None") == (
        "use --recompute full or drop --recompute-num-layers"
    )
    assert cli_fix("set overlap_grad_reduce=True or overlap_param_gather=False") == (
        "use --overlap-grad-reduce or drop --overlap-param-gather"
    )
    assert cli_fix("try pp in {1, 2} or pipeline_model_parallel_layout='Et|tt|L'") == (
        "try pp in {1, 2} or --pipeline-model-parallel-layout 'Et|tt|L'"
    )
    assert cli_fix("use runtime='megatron', or drop cudnn_norm") == (
        "use --runtime megatron, or drop --cudnn-norm"
    )
    assert cli_fix("set dp=4 (num_gpus / 2)").startswith(
        "set dp=4 (spec field, no flag: derived as --num-gpus / (tp·pp·cp)) (num_gpus"
    )
    # operands, dotted fields, flags already given and unknown names stay as they are
    for text in ("tp (2)", "TrainingJob.seq_length=4", "--tp=2", "rope_theta=1e6", "drop it"):
        assert cli_fix(text) == text


def test_the_api_keeps_field_names_and_the_cli_form_has_none_left() -> None:
    model = get_preset("tiny")
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=8)
    job = TrainingJob(seq_length=512, global_batch_size=8, precision="nvfp4")
    plan = ParallelPlan(
        dp=8,
        sequence_parallel=True,
        tp_comm_overlap=True,
        overlap_param_gather=True,
        recompute_num_layers=1,
    )
    messages = [v.message for v in check_plan(model, cluster, job, plan)]
    assert any("set sequence_parallel=False" in m for m in messages)
    for message in messages:
        text = cli_fix(message)
        left = [f for f in FIELD_FRAGMENT.findall(text) if f in FIX_FLAGS]
        assert not left, (message, text)


def test_flag_form_of_a_field_without_a_flag_is_none() -> None:
    assert flag_form("schedule", "'1f1b'") is None
