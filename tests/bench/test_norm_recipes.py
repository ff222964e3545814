"""bench/norm_recipes.py: which rows ran Transformer Engine's norms on cuDNN, per release and
recipe (Megatron-Bridge perf_plugins.py / setup_experiment.py, NeMo 2.0 scripts, the model
zoo configs)."""

from __future__ import annotations

import pytest

from tests.bench.bench_loader import load_bench

rules = load_bench("norm_recipes")
rows = load_bench("published_rows")
options_mod = load_bench("row_options")


def mbridge(release: str, model: str, gpu: str, precision: str, task: str = "pretrain") -> dict:
    return {
        "source_id": f"MBRIDGE-{release}",
        "model": model,
        "gpu_type": gpu,
        "precision": precision,
        "task": task,
    }


@pytest.mark.parametrize(
    ("release", "model", "gpu", "precision", "task", "on"),
    [
        # v0.1.0rc4 setup_experiment.py: GB200 Llama 3 70B BF16/CS keeps them; the 405B
        # test compares a string with a list, so 405B CS drops them; MXFP8 drops them.
        ("25.09", "LLAMA3_70B", "GB200 (NVL72)", "not stated (25.09 page)", "pretrain", True),
        ("25.09", "LLAMA3_70B", "GB200 (NVL72)", "alternative quantization", "pretrain", False),
        ("25.09", "LLAMA3.1_405B", "GB200 (NVL72)", "not stated (25.09 page)", "pretrain", False),
        ("25.09", "LLAMA3_70B", "B200", "not stated (25.09 page)", "pretrain", False),
        ("25.09", "LLAMA3_8B", "H100-SXM5-80GB", "not stated (25.09 page)", "pretrain", True),
        # v0.2.0 perf_plugins.py: GB200 and GB300, 405B CS now matched; DeepSeek not yet.
        ("25.11", "LLAMA3.1_405B", "GB300 (NVL72)", "FP8-CS", "pretrain", True),
        ("25.11", "LLAMA3.1_405B", "B200", "FP8-CS", "pretrain", False),
        ("25.11", "LLAMA3_8B", "GB200 (NVL72)", "FP8-CS", "pretrain", False),
        ("25.11", "DeepSeekV3 (w/o MTP)", "GB200 (NVL72)", "FP8-MX", "pretrain", False),
        # v0.3.0: DeepSeek MXFP8 on GB200/GB300 (not B200/B300); Kimi from v0.3.1 (26.02.01).
        ("26.02", "DeepSeekV3", "GB200 (NVL72)", "MXFP8", "pretrain", True),
        ("26.02", "DeepSeekV3", "B200", "MXFP8", "pretrain", False),
        ("26.02", "Kimi_K2", "GB300 (NVL72)", "MXFP8", "pretrain", False),
        ("26.02.01", "Kimi_K2", "GB300 (NVL72)", "MXFP8", "pretrain", True),
        ("26.04", "LLAMA3.1_405B", "GB200 (NVL72)", "MXFP8", "pretrain", False),
        ("26.04.01", "Qwen3_235B_a22B", "GB300 (NVL72)", "MXFP8", "pretrain", False),
        # v0.4.0 on: every Llama SFT run; LoRA is not SFT.
        ("26.06", "LLAMA3_70B", "GB200 (NVL72)", "MXFP8", "SFT (fine-tuning)", True),
        ("26.06", "LLAMA3_70B", "GB200 (NVL72)", "MXFP8", "LoRA (fine-tuning)", False),
        # v0.5.0: GPT-OSS 20B pretraining only, not 120B.
        ("26.06", "GPT OSS 20B", "GB300 (NVL72)", "BF16", "pretrain", True),
        ("26.06.01", "GPT OSS 120B", "GB300 (NVL72)", "MXFP8", "pretrain", False),
        # A later release takes 26.06.01's rules.
        ("26.08", "DeepSeekV3", "GB300 (NVL72)", "MXFP8", "pretrain", True),
    ],
)
def test_megatron_bridge_keeps_the_cudnn_norm_per_release(release, model, gpu, precision, task, on):
    raw = mbridge(release, model, gpu, precision, task)
    assert rules.norm_backend_fields(raw) == ({"cudnn_norm": True} if on else {})


def test_a_release_before_the_rules_is_refused():
    with pytest.raises(rows.NotExpressible, match="add its rule"):
        rules.norm_backend_fields(mbridge("25.07", "LLAMA3_70B", "GB200", "BF16"))
    with pytest.raises(rows.NotExpressible, match="is none of those whose"):
        rules.norm_backend_fields(mbridge("26.03", "LLAMA3_70B", "GB200", "BF16"))


def test_every_keep_rule_names_its_release_range_and_source():
    for rule in rules.MBRIDGE_KEEPS:
        assert rule.first in rules.MBRIDGE_RELEASES and rule.source
        assert rule.last is None or rule.last in rules.MBRIDGE_RELEASES


@pytest.mark.parametrize(
    ("version", "model", "fsdp", "on"),
    [
        ("NeMo 25.02 container", "Llama3.1 405B", "", False),
        ("NeMo 25.04 container", "Llama3.1 405B", "", True),
        ("NeMo 25.07 container", "Llama3.1 405B", "", False),
        ("NeMo 25.07 container", "Llama3.1 405B", "Megatron-FSDP", True),
        ("NeMo 25.09 container", "Nemotron4 340B", "", True),
        ("NeMo 25.04.rc2 container", "LLAMA3-8B", "", False),
    ],
)
def test_nemo_scripts_set_the_cudnn_norm_for_405b_and_nemotron4(version, model, fsdp, on):
    raw = {"source_id": "NEMO-PERF", "source_version": version, "model": model}
    raw["fsdp_or_zero"] = fsdp
    assert rules.norm_backend_fields(raw) == ({"cudnn_norm": True} if on else {})


@pytest.mark.parametrize(
    ("model", "on"),
    [("Qwen3-235B-A22B", False), ("DeepSeek-V3", True), ("Kimi-K2", True)],
)
def test_model_zoo_configs(model, on):
    raw = {"source_id": "MOEZOO-X-GB200", "model": model}
    assert rules.norm_backend_fields(raw) == ({"cudnn_norm": True} if on else {})


def test_options_for_row_applies_the_rule():
    raw = mbridge("26.02", "DeepSeekV3", "GB300 (NVL72)", "MXFP8")
    raw.update(source_version="NeMo 26.02 container", row_id="t")
    assert options_mod.options_for_row(raw).cudnn_norm
    raw["gpu_type"] = "B300"
    assert not options_mod.options_for_row(raw).cudnn_norm
