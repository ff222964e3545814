"""The training loop end to end on the executor's engine (tiny model, gloo, 2 ranks).

Three spawned worlds of the same DP2 FSDP plan (distributed optimizer):
A trains warmup 1 + 4 measured steps (probing the host after the timed ones); B trains
steps 0-1 and saves; C resumes B and trains steps 2-4. C must repeat A's losses exactly and
B must repeat A's first two (the probe leaves training alone). A's run
folder is checked key by key against the metrics contract. One more world runs PP2 to see
per-microbatch phases and pipeline traffic on their lanes.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from executor.checkpoint import checkpoint_bytes
from executor.run import RunConfig, execute, prepare
from profiles.host_probe import host_probe
from specs import serde
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.host import stolen_cpu_s
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from specs.timeline import Timeline

METRIC_KEYS = {
    "iteration_time_s",
    "iteration_time_p50_s",
    "iteration_time_p95_s",
    "tokens_per_s",
    "mfu",
    "loss",
    "peak_memory_gib",
    "collectives",
}


def bundle(global_batch: int = 8, **plan: object) -> PlanBundle:
    plan_spec = ParallelPlan(**plan)  # type: ignore[arg-type]
    return PlanBundle(
        model=get_preset("tiny"),
        cluster=ClusterSpec(hardware="cpu", num_gpus=plan_spec.world_size),
        job=TrainingJob(seq_length=32, global_batch_size=global_batch, precision="fp32"),
        plan=plan_spec,
    )


@pytest.fixture(scope="module")
def fsdp_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("runs")
    b = bundle(dp=2, distributed_optimizer=True)
    a = execute(
        RunConfig(
            bundle=b,
            out_dir=str(root / "a"),
            steps=4,
            warmup=1,
            profile_steps=2,
            model_flops_per_iteration=1e9,
            peak_flops_per_rank=1e12,
            host_probe=host_probe,
        )
    )
    part = execute(
        RunConfig(bundle=b, out_dir=str(root / "b"), steps=2, warmup=0, save_dir=str(root / "ckpt"))
    )
    resumed = execute(
        RunConfig(
            bundle=b, out_dir=str(root / "c"), steps=3, warmup=0, resume_dir=str(root / "ckpt")
        )
    )
    return {"root": root, "a": a, "b": part, "c": resumed}


@pytest.mark.slow
def test_resume_continues_with_the_uninterrupted_losses(fsdp_runs: dict) -> None:
    a = json.loads((fsdp_runs["root"] / "a" / "metrics.json").read_text())
    uninterrupted = a["warmup_loss"] + a["loss"]  # steps 0..4
    assert list(fsdp_runs["b"].loss) == uninterrupted[:2]
    assert list(fsdp_runs["c"].loss) == uninterrupted[2:]
    assert fsdp_runs["b"].next_step == 2 and fsdp_runs["c"].next_step == 5
    c = json.loads((fsdp_runs["root"] / "c" / "metrics.json").read_text())
    assert c["first_step"] == 2


@pytest.mark.slow
def test_loss_falls_on_the_synthetic_stream(fsdp_runs: dict) -> None:
    a = json.loads((fsdp_runs["root"] / "a" / "metrics.json").read_text())
    losses = a["warmup_loss"] + a["loss"]
    assert losses[0] == pytest.approx(math.log(512), rel=0.05)  # uniform guess at init
    assert losses[-1] < losses[0] - 0.1


@pytest.mark.slow
def test_run_folder_holds_the_metrics_contract(fsdp_runs: dict) -> None:
    out = fsdp_runs["root"] / "a"
    m = json.loads((out / "metrics.json").read_text())
    assert m.keys() >= METRIC_KEYS
    assert len(m["iteration_time_s"]) == 4 and all(t > 0 for t in m["iteration_time_s"])
    assert m["profiled_steps"] == [2, 3] and m["timed_steps"] == [0, 1]
    timed = [m["iteration_time_s"][i] for i in m["timed_steps"]]
    assert m["iteration_time_p50_s"] == pytest.approx(sum(timed) / 2)
    assert m["tokens_per_s"] == pytest.approx(8 * 32 / m["iteration_time_p50_s"])
    assert m["mfu"] == pytest.approx(1e9 / (m["iteration_time_p50_s"] * 2 * 1e12))
    assert len(m["peak_memory_gib"]) == 2
    # Weights, grads and AdamW state of the 0.7M-parameter model: a few MiB per rank.
    assert all(1e-3 < g < 0.5 for g in m["peak_memory_gib"])
    ops = {(c["op"], c["group"]) for c in m["collectives"]}
    assert {("all_gather", "dp-cp"), ("reduce_scatter", "dp-cp")} <= ops  # FSDP2
    assert all(c["bytes"] > 0 and c["count"] > 0 for c in m["collectives"])
    # the host probe after each timed step (not the profiled ones), a fraction of a step
    assert len(m["host_probe_s"]) == 2 and all(0 < p < 0.1 for p in m["host_probe_s"])
    assert m["host_probe_p50_s"] == pytest.approx(sum(m["host_probe_s"]) / 2)
    # the machine's steal time per measured step (Linux reports it), a share of its CPU time
    if stolen_cpu_s() is not None:
        assert len(m["host_steal"]) == 4 and all(0.0 <= f <= 1.0 for f in m["host_steal"])
        assert 0.0 <= m["host_steal_timed"] <= max(m["host_steal"][:2])
    unprobed = json.loads((fsdp_runs["root"] / "b" / "metrics.json").read_text())
    assert "host_probe_s" not in unprobed
    assert serde.load(PlanBundle, out / "plan.json") == bundle(dp=2, distributed_optimizer=True)
    timeline = serde.load(Timeline, out / "measured.json")
    assert timeline.ranks_shown == (0, 1)
    for rank in (0, 1):
        kinds = {(e.lane, e.kind) for e in timeline.for_rank(rank)}
        assert {
            ("compute", "forward"),
            ("compute", "backward"),
            ("optimizer", "optimizer"),
        } <= kinds
        assert ("dp", "reduce_scatter") in kinds
    assert sorted(p.name for p in (out / "traces").iterdir()) == ["rank0.json", "rank1.json"]


@pytest.mark.slow
def test_pipeline_run_shows_microbatches_and_stage_traffic(tmp_path: Path) -> None:
    summary = execute(
        RunConfig(bundle=bundle(pp=2, micro_batch_size=2), out_dir=str(tmp_path), steps=2, warmup=1)
    )
    assert summary is not None and len(summary.loss) == 2
    timeline = serde.load(Timeline, tmp_path / "measured.json")
    for rank in (0, 1):
        events = timeline.for_rank(rank)
        forwards = [e for e in events if e.kind == "forward"]
        assert sorted(e.microbatch for e in forwards) == [0, 1, 2, 3]  # 8 / (mbs 2 · dp 1)
        assert {e.lane for e in events if e.kind in ("send", "recv")} == {"pp"}


def test_bad_input_fails_before_any_process_starts(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="heads_divisible_by_tp"):
        prepare(RunConfig(bundle=bundle(tp=3), out_dir=str(tmp_path)))
    with pytest.raises(SpecError, match="no such file"):
        prepare(RunConfig(bundle=bundle(dp=2), out_dir=str(tmp_path), data="missing.txt"))
    with pytest.raises(SpecError, match=r"steps \(0\) must be >= 1"):
        prepare(RunConfig(bundle=bundle(dp=2), out_dir=str(tmp_path), steps=0))
    with pytest.raises(SpecError, match="exceeds what this machine can host"):
        prepare(RunConfig(bundle=bundle(global_batch=4096, dp=4096), out_dir=str(tmp_path)))
    with pytest.raises(SpecError, match="no complete checkpoint there"):
        prepare(RunConfig(bundle=bundle(dp=2), out_dir=str(tmp_path), resume_dir=str(tmp_path)))


def test_every_path_is_checked_before_launch(tmp_path: Path, monkeypatch) -> None:
    b = bundle(dp=2)
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    with pytest.raises(SpecError, match=r"^--out .*a-file: exists and is not a folder"):
        prepare(RunConfig(bundle=b, out_dir=str(a_file)))
    with pytest.raises(SpecError, match=r"^--out /proc/x: not a writable folder"):
        prepare(RunConfig(bundle=b, out_dir="/proc/x"))
    with pytest.raises(SpecError, match=r"^--save .*: not a writable folder"):
        prepare(RunConfig(bundle=b, out_dir=str(tmp_path / "run"), save_dir=str(a_file / "c")))
    with pytest.raises(SpecError, match=r"^--resume .*a-file: not a folder"):
        prepare(RunConfig(bundle=b, out_dir=str(tmp_path / "run"), resume_dir=str(a_file)))
    with pytest.raises(SpecError, match="need --save DIR"):
        prepare(RunConfig(bundle=b, out_dir=str(tmp_path / "run"), save_interval=2))
    with pytest.raises(SpecError, match="--keep must be >= 1, got 0"):
        prepare(RunConfig(bundle=b, out_dir=str(tmp_path / "r"), save_dir=str(tmp_path), keep=0))
    # A disk with less free space than one checkpoint of the plan.
    full = shutil.disk_usage(tmp_path)._replace(free=checkpoint_bytes(b) - 1)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: full)
    with pytest.raises(SpecError, match=r"needs about 0\.01 GiB .* but 0\.01 GiB is free"):
        prepare(RunConfig(bundle=b, out_dir=str(tmp_path / "r"), save_dir=str(tmp_path / "c")))
    assert not (tmp_path / "c").joinpath(".paraplan-write-probe").exists()
