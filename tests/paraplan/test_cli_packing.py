"""``--packed-doc-len`` on the command line: the job it builds, `estimate` and `plan`
pricing and naming a packed job (text and JSON), the refusals with the flag named, and the
exports."""

from __future__ import annotations

import argparse
import json

import pytest

from paraplan.cli import main
from paraplan.commands import estimate
from paraplan.commands import plan as plan_command
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from specs.serde import dumps
from tests.paraplan.cli_helpers import parse_estimate, run_estimate_json

BASE = ["--model", "llama3-8b", "--num-gpus", "8", "--seq-len", "16384", "--global-batch", "8"]
PLAN = ["--tp", "2", "--cp", "2", "--dist-opt"]


def test_the_flag_builds_the_jobs_packing() -> None:
    from paraplan.args import job_from_args

    assert job_from_args(parse_estimate(BASE)).packed_document_tokens is None
    job = job_from_args(parse_estimate(BASE, "--packed-doc-len", "2048"))
    assert job.packed_document_tokens == 2048 and job.attention_span_tokens == 2048


def test_estimate_prices_and_names_a_packed_job(capsys) -> None:
    whole = run_estimate_json(capsys, BASE, *PLAN)
    docs = run_estimate_json(capsys, BASE, *PLAN, "--packed-doc-len", "2048")
    assert "packing" not in whole
    assert docs["packing"]["packed_document_tokens"] == 2048
    assert docs["packing"]["documents_per_sequence"] == 8
    assert "Megatron-Bridge" in docs["packing"]["mfu_convention"]
    assert docs["iteration_time_s"] < whole["iteration_time_s"]
    assert docs["flops_per_iteration"] < whole["flops_per_iteration"]
    assert estimate.run(parse_estimate(BASE, *PLAN, "--packed-doc-len", "2048")) == 0
    out = capsys.readouterr().out
    assert "packed sequences: documents of 2048 tokens in 16384-token sequences (8 per" in out
    assert "MFU counts attention per packed document" in out


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("0", "--packed-doc-len (TrainingJob.packed_document_tokens) must be a positive"),
        ("20000", "(20000) exceeds seq_length (16384)"),
    ],
)
def test_bad_lengths_exit_2_naming_the_flag(capsys, value: str, words: str) -> None:
    assert main(["estimate", *BASE, *PLAN, "--packed-doc-len", value]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_the_cp_rule_lists_the_padded_lengths(capsys) -> None:
    assert estimate.run(parse_estimate(BASE, *PLAN, "--packed-doc-len", "2046")) == 1
    out = capsys.readouterr().out
    assert "[packed_document_divisible_by_2cp]" in out and "{2044, 2048}" in out


def test_the_materialized_kernel_and_the_torch_runtime_refuse(capsys) -> None:
    argv = ["estimate", *BASE, *PLAN, "--packed-doc-len", "2048"]
    assert main([*argv, "--attention", "materialized"]) == 2
    assert "packed_sequences_need_fused_attention" in capsys.readouterr().err
    assert main([*argv, "--runtime", "torch"]) == 2
    assert "packed_sequences_need_megatron_runtime" in capsys.readouterr().err


def test_plan_searches_a_packed_job_and_keeps_cp_per_document(capsys) -> None:
    parser = argparse.ArgumentParser()
    plan_command.add_arguments(parser)
    argv = ["--model", "tiny", "--hardware", "h100-sxm-80gb", "--seq-len", "512"]
    argv += ["--global-batch", "8", "--num-gpus", "4", "--no-tp-comm-overlap", "--max-mbs", "2"]
    args = parser.parse_args([*argv, "--packed-doc-len", "100", "--top", "5", "--json"])
    assert plan_command.run(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["packing"]["packed_document_tokens"] == 100 and data["top"]
    # 100 % (2·cp) == 0 for cp 1 and 2, not for cp 4 (100 % 8 = 4)
    assert {p["cp"] for p in data["top"]} <= {1, 2}


def _packed_plan_file(tmp_path, cp: int = 2) -> str:
    bundle = PlanBundle(
        model=get_preset("tiny"),
        cluster=ClusterSpec(hardware="h100-sxm-80gb", num_gpus=2),
        job=TrainingJob(seq_length=512, global_batch_size=2, packed_document_tokens=128),
        plan=ParallelPlan.for_world(2, cp=cp),
    )
    path = tmp_path / "plan.json"
    path.write_text(dumps(bundle))
    return str(path)


def test_megatron_export_masks_documents_and_torchtitan_refuses(tmp_path, capsys) -> None:
    path = _packed_plan_file(tmp_path)
    assert main(["export", path, "--to", "megatron"]) == 0
    out = capsys.readouterr().out
    assert "--dataloader-inter-document-masking" in out
    assert "# packed sequences priced with documents of 128 tokens" in out
    assert "each padded to a multiple of 2*cp = 4" in out
    assert main(["export", path, "--to", "torchtitan"]) == 2
    assert "torchtitan_packed_sequences" in capsys.readouterr().err
