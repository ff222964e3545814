"""`paraplan estimate` and `paraplan export` of a model with the parallel attention+MLP
block (``ModelSpec.layer_block``): the GPT-NeoX-20B preset and a spec JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specs import serde
from specs.presets import get_preset
from tests.paraplan.cli_helpers import run_cli, run_estimate_json

# the GPT-NeoX-20B run: 96 A100 40GB, tp 2, pp 4, dp 12, mbs 4, full recompute
# (EleutherAI/gpt-neox configs/20B.yml)
NEOX_RUN = [
    "--model", "gpt-neox-20b", "--hardware", "a100-sxm-40gb", "--num-gpus", "96",
    "--seq-len", "2048", "--global-batch", "1536", "--tp", "2", "--pp", "4", "--mbs", "4",
    "--recompute", "full", "--recompute-num-layers", "1", "--dist-opt",
]  # fmt: skip


def test_estimate_prices_the_neox_run(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_estimate_json(capsys, NEOX_RUN)
    assert data["fits"] and data["iteration_time_s"] > 0
    assert data["breakdown"]["tp_exposed"] > 0  # tp 2: the layers' all-reduces


def test_spec_json_sets_the_block(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    spec = get_preset("gpt-neox-20b")
    base = NEOX_RUN[2:]
    times = {}
    for block in ("parallel", "sequential"):
        path = tmp_path / f"{block}.json"
        path.write_text(serde.dumps(spec.replace(layer_block=block)))
        data = run_estimate_json(capsys, ["--model", str(path), *base])
        times[block] = data
    # one tensor-parallel all-reduce fewer per layer forward (and in its recompute)
    assert (
        times["parallel"]["breakdown"]["tp_exposed"]
        < times["sequential"]["breakdown"]["tp_exposed"]
    )
    assert times["parallel"]["flops_per_iteration"] == times["sequential"]["flops_per_iteration"]


def test_torch_runtime_refuses_the_block(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "estimate", *NEOX_RUN, "--runtime", "torch")
    assert code != 0
    assert "parallel_block_not_in_executor" in err


def test_tp_comm_overlap_is_refused_with_its_rule(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "estimate", *NEOX_RUN, "--sp", "--tp-comm-overlap", "--json")
    assert code == 1
    rules = {v["rule"] for v in json.loads(out)["violations"]}
    assert "parallel_block_not_with_tp_comm_overlap" in rules
