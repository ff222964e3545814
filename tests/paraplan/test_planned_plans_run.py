"""The planner–executor invariant: every plan that `paraplan plan` ranks in ``top`` and
that fits runs one step under `paraplan execute` (tiny random models and jobs on 1-4 gloo
ranks; pipelines pinned now and then so uneven splits and short pipelines come up, and a
Megatron-FSDP sharding strategy pinned now and then so FSDP plans come up), and
``metrics.json`` names the pipeline schedule it ran."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
from pathlib import Path
from tempfile import TemporaryDirectory

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from executor.pipeline import schedule_name
from paraplan.cli import main
from specs import serde
from specs.model import ModelSpec
from specs.plan import ParallelPlan

pytestmark = pytest.mark.slow

PLAN_FIELDS = [f.name for f in dataclasses.fields(ParallelPlan)]


def _cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    return code, out.getvalue()


@st.composite
def problems(draw: st.DrawFn) -> dict[str, object]:
    pp = draw(st.sampled_from([None, 2, 3]))
    ranks = draw(st.sampled_from([1, 2, 3, 4] if pp is None else [pp, 2 * pp]))
    return {
        "num_layers": draw(st.sampled_from([2, 3, 5])),
        "tied": draw(st.booleans()),
        "num_gpus": min(ranks, 4),
        "pp": pp,
        "seq": draw(st.sampled_from([16, 32])),
        "batch": draw(st.integers(1, 8)),
        "sharding": draw(st.sampled_from([None, "optim", "optim_grads", "optim_grads_params"])),
    }


def _top_plans(tmp: Path, p: dict[str, object]) -> list[tuple[str, dict]]:
    model = ModelSpec(
        name="prop-tiny",
        num_layers=int(p["num_layers"]),
        hidden_size=32,
        num_attention_heads=4,
        num_query_groups=2,
        ffn_hidden_size=64,
        vocab_size=256,
        max_position_embeddings=64,
        tied_embeddings=bool(p["tied"]),
    )
    (tmp / "model.json").write_text(serde.dumps(model))
    argv = ["plan", "--model", str(tmp / "model.json"), "--num-gpus", str(p["num_gpus"])]
    argv += ["--seq-len", str(p["seq"]), "--global-batch", str(p["batch"]), "--top", "2"]
    if p["pp"] is not None and int(p["pp"]) <= int(p["num_gpus"]):
        argv += ["--pp", str(p["pp"])]
    if p["sharding"] is not None:
        argv += ["--data-parallel-sharding-strategy", str(p["sharding"])]
    code, out = _cli(*argv, "--json", "--out", str(tmp / "plan"))
    if code != 0:
        return []  # no plan: nothing ranked
    template = json.loads((tmp / "plan" / "plan.json").read_text())
    return [
        (e["label"], template | {"plan": {k: e[k] for k in PLAN_FIELDS}})
        for e in json.loads(out)["top"]
        if e["fits"]
    ]


@settings(
    max_examples=6,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(problems())
@example(  # ZeRO-3-like sharding on a pipeline: dp2 pp2, optim_grads_params
    {
        "num_layers": 3,
        "tied": True,
        "num_gpus": 4,
        "pp": 2,
        "seq": 16,
        "batch": 8,
        "sharding": "optim_grads_params",
    }
)
def test_every_fitting_top_plan_runs_one_step(p: dict[str, object]) -> None:
    with TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for i, (label, bundle) in enumerate(_top_plans(tmp, p)):
            path = tmp / f"plan{i}.json"
            path.write_text(json.dumps(bundle))
            out_dir = tmp / f"run{i}"
            code, _ = _cli(
                "execute", str(path), "--steps", "1", "--warmup", "0", "--out", str(out_dir)
            )
            assert code == 0, f"{label} ({p}) did not run"
            if p["sharding"] is not None:  # the pin holds: a Megatron-FSDP plan ran
                assert bundle["plan"]["use_megatron_fsdp"], label
                assert bundle["plan"]["data_parallel_sharding_strategy"] == p["sharding"]
            metrics = json.loads((out_dir / "metrics.json").read_text())
            assert len(metrics["loss"]) == 1, label
            plan = serde.from_dict(ParallelPlan, bundle["plan"])
            schedule = schedule_name(plan, plan.num_microbatches(int(p["batch"])))
            assert metrics["pipeline_schedule"] == schedule, label
            assert (metrics["pipeline_schedule_note"] is not None) == (schedule == "GPipe")
