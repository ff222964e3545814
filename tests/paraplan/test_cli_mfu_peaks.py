"""MFU over the bf16 peak beside MFU over the job's GEMM peak, in `paraplan estimate` and
`plan` (text, table, JSON, sizing) through `paraplan.cli.main`; a bf16 job prints one
figure as before."""

from __future__ import annotations

import json

import pytest

from specs.formats import percent
from tests.paraplan.cli_helpers import run_cli

LLAMA = ["--model", "llama3-8b", "--num-gpus", "8", "--seq-len", "4096", "--global-batch", "32"]
PLAN = ["--tp", "2", "--sp"]
TINY = ["--model", "tiny", "--seq-len", "512", "--global-batch", "8", "--max-mbs", "1"]
# H100 SXM dense peaks of profiles/derive.py: fp8 1978.9 and bf16 989.4 TFLOP/s
FP8_OVER_BF16 = 1978.9 / 989.4


def test_estimate_of_an_fp8_job_prints_both_peaks(capsys) -> None:
    code, out, _ = run_cli(capsys, "estimate", *LLAMA, *PLAN, "--precision", "fp8", "--json")
    data = json.loads(out)
    assert code == 0 and data["mfu_peak_dtype"] == "fp8"
    assert data["mfu_bf16"] == pytest.approx(data["mfu"] * FP8_OVER_BF16)
    code, out, _ = run_cli(capsys, "estimate", *LLAMA, *PLAN, "--precision", "fp8")
    row = next(line for line in out.splitlines() if "MFU (model FLOPs" in line)
    shown = f"{percent(data['mfu'])} of the fp8 peak, {percent(data['mfu_bf16'])} of the bf16 peak"
    assert code == 0 and shown in row


def test_estimate_of_a_bf16_job_prints_one_figure(capsys) -> None:
    code, out, _ = run_cli(capsys, "estimate", *LLAMA, *PLAN, "--json")
    data = json.loads(out)
    assert code == 0 and data["mfu_peak_dtype"] == "bf16" and data["mfu_bf16"] == data["mfu"]
    code, out, _ = run_cli(capsys, "estimate", *LLAMA, *PLAN)
    row = next(line for line in out.splitlines() if "MFU (model FLOPs" in line)
    assert percent(data["mfu"]) in row and "peak" not in row


def test_plan_of_an_fp8_job_shows_both_columns_and_both_in_its_best_line(capsys) -> None:
    code, out, _ = run_cli(capsys, "plan", *TINY, "--num-gpus", "8", "--precision", "fp8")
    header = next(line for line in out.splitlines() if "tokens/s" in line and "┃" in line)
    best = next(line for line in out.splitlines() if line.startswith("Best: "))
    assert code == 0 and "MFU (fp8 peak)" in header and "MFU (bf16 peak)" in header
    assert "of the fp8 peak, " in best and " of the bf16 peak, peak " in best
    code, out, _ = run_cli(capsys, "plan", *TINY, "--num-gpus", "8", "--precision", "fp8", "--json")
    best_json = json.loads(out)["best"]
    assert best_json["mfu_bf16"] == pytest.approx(best_json["mfu"] * FP8_OVER_BF16)


def test_plan_of_a_bf16_job_keeps_one_mfu_column(capsys) -> None:
    code, out, _ = run_cli(capsys, "plan", *TINY, "--num-gpus", "8")
    header = next(line for line in out.splitlines() if "tokens/s" in line and "┃" in line)
    assert code == 0 and " MFU " in header and "bf16 peak" not in out


def test_plan_sizing_of_an_fp8_job_gives_both(capsys) -> None:
    argv = [*TINY, "--precision", "fp8", "--tokens", "1e9", "--max-gpus", "8"]
    code, out, _ = run_cli(capsys, "plan", *argv, "--json")
    rows = [r for r in json.loads(out)["rows"] if r["plan"] is not None]
    assert code == 0 and rows
    for row in rows:
        assert row["mfu_bf16"] == pytest.approx(row["mfu"] * FP8_OVER_BF16)
    code, out, _ = run_cli(capsys, "plan", *argv)
    assert code == 0 and "of the fp8 peak, " in out and " of the bf16 peak" in out
