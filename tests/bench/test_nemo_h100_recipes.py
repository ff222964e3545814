"""bench/nemo_h100_recipes.py: NeMo 2.0's H100 pre-train configurations as table rows
(NVIDIA/NeMo recommended_model_configs/model_configs_h100.csv, v2.2.0 to v2.5.0rc0)."""

from __future__ import annotations

import inspect

import pytest

from tests.bench.bench_loader import load_bench

bench = load_bench("nemo_h100_recipes")
rules = load_bench("nemo_recipes")
options_rules = load_bench("nemo_options")
rows_mod = load_bench("published_rows")


def _skip_without_dev_rows() -> None:
    _, error = bench.rows_by_ids(",".join(sorted(set(bench.ARCH_ROWS.values()))))
    if error is not None:
        pytest.skip(error)


def test_every_config_fills_its_gpus_and_ships_in_a_known_release():
    for c in bench.CONFIGS:
        assert c.gpus % (c.tp * c.pp * c.cp) == 0, c
        assert c.releases and set(c.releases) <= set(bench.RELEASE_TAGS), c
        assert c.model in bench.ARCH_ROWS or c.model in bench.HYBRID_MODELS


def test_config_table_parses_releases_and_modules():
    configs = bench.parse_configs(
        "releases,model,dtype,gpus,seq,tp,pp,cp,ep,vp,mbs,gbs,etp,fsdp,recompute_modules\n"
        "25.07+,DeepSeek V3,fp8,1024,4096,2,16,1,64,1,1,8192,1,0,mla_up_proj/mlp\n"
        "25.02/25.04,Llama3 8B,bf16,8,8192,1,1,2,1,1,1,128,,1,\n"
    )
    deepseek, llama = configs
    assert deepseek.releases == ("25.07", "25.09") and deepseek.precision == "FP8"
    assert deepseek.recompute == "selective (mla_up_proj, mlp)" and deepseek.etp == 1
    assert llama.releases == ("25.02", "25.04") and llama.fsdp and llama.etp is None


def test_table_row_states_the_columns_a_performance_table_prints():
    _skip_without_dev_rows()
    config = next(c for c in bench.CONFIGS if c.model == "Llama3 8B" and c.fsdp)
    raw = bench.table_row(config, "25.07")
    assert raw["source_id"] == "NEMO-PERF-25.07"
    assert raw["source_version"] == "NeMo 25.07 container"
    assert raw["gpu_type"] == "H100-SXM5-80GB" and raw["trust"] == "B"
    assert raw["fsdp_or_zero"] == "Megatron-FSDP" and raw["dp"] == "8"


def test_deepseek_rows_build_one_mtp_layer_on_the_last_stage():
    _skip_without_dev_rows()
    config = next(c for c in bench.CONFIGS if c.model == "DeepSeek V3" and "25.09" in c.releases)
    case = rows_mod.case_for_row(bench.table_row(config, "25.09"))
    assert case.model.mtp_num_layers == 1
    assert case.plan.pipeline_model_parallel_layout.endswith("|tmL")


def test_priced_configs_report_memory_time_and_options():
    _skip_without_dev_rows()
    config = next(c for c in bench.CONFIGS if c.model == "Llama3 70B" and c.precision == "FP8")
    result = bench.price(config, "25.09")
    assert result["peak_gib"] > 0 and result["iteration_s"] > 0 and 0 < result["mfu"] < 1
    assert result["options"]["tp_comm_overlap"] is True
    assert result["options"]["cross_entropy_fusion"] == "te"
    # Megatron-LM's defaults keep bf16 weights beside TE's FP8 copies and fp32 gradients.
    assert result["without_rules"]["peak_gib"] > result["peak_gib"]


NEMOTRON_H = (
    # model, gpus, tp, gbs: model_configs_h100.csv's nemotronh pre_train rows (v2.4.0 on)
    ("Nemotron-H 8B", 8, 1, 128),
    ("Nemotron-H 47B", 64, 8, 192),
    ("Nemotron-H 56B", 64, 8, 192),
    ("Nemotron-H 56B", 256, 8, 768),
)
PRESET_LAYERS = {"Nemotron-H 8B": 52, "Nemotron-H 47B": 98, "Nemotron-H 56B": 118}
"""``num_layers`` of NeMo's ``NemotronHConfig8B`` / ``47B`` / ``56B`` (``gpt/model/ssm.py``)."""


def _nemotron_h() -> list:
    return [c for c in bench.CONFIGS if c.model.startswith("Nemotron-H")]


def test_nemotron_h_configs_parse_as_the_csv_states_them():
    configs = _nemotron_h()
    assert [(c.model, c.gpus, c.tp, c.gbs) for c in configs] == list(NEMOTRON_H)
    for c in configs:
        assert c.releases == ("25.07", "25.09") and c.precision == "FP8", c
        assert (c.seq, c.pp, c.cp, c.vpp, c.ep, c.mbs) == (8192, 1, 1, 1, 1, 1), c
        assert not c.fsdp and c.recompute == "" and c.etp is None, c
    assert not any("nemotronh" in configs for configs, _, _ in bench.NO_PRESET)


def test_nemotron_h_rows_state_no_architecture_and_build_their_preset():
    for c in _nemotron_h():
        raw = bench.table_row(c, "25.09")
        assert all(raw[k] == "" for k in bench.ARCHITECTURE_COLUMNS), c
        case = rows_mod.case_for_row(raw)
        assert case.model.num_layers == PRESET_LAYERS[c.model]
        assert case.model.vocab_size == 131072 and case.model.name == c.model
        assert case.plan.tp == c.tp and case.plan.dp == c.gpus // c.tp


def test_nemotron_h_row_refuses_a_contradicting_architecture_column():
    config = next(c for c in _nemotron_h() if c.model == "Nemotron-H 56B")
    raw = bench.table_row(config, "25.07") | {"hidden_size": "4096"}
    with pytest.raises(bench.NotExpressible, match="hidden_size"):
        rows_mod.case_for_row(raw)


def test_nemotron_h_configs_report_memory_fit_and_recipe_settings():
    _skip_without_dev_rows()  # the report prices every model
    for c in _nemotron_h():
        result = bench.price(c, "25.07")
        assert "error" not in result, result
        assert result["peak_gib"] > 0 and isinstance(result["fits"], bool)
        assert result["iteration_s"] > 0 and 0 < result["mfu"] < 1
        options = result["options"]
        # cuda_graphs 1: enable_cuda_graph, whole layers; FP8 ds with FP8 parameters.
        assert options["cuda_graph_scopes"] == ["layer"]
        assert options["fp8_param"] is True and options["main_grad_bytes"] == 2
        assert options["expandable_segments"] is True  # executors.py, v2.4.0 on
        # MegatronCommOverlapCallback(tp_comm_overlap=True): on at tp 8 with SP only.
        assert options.get("tp_comm_overlap", False) is (c.tp > 1)
        assert result["without_rules"]["peak_gib"] > result["peak_gib"]
    report = bench.nemo_h100_report()
    priced = [p for p in report["configs"] if p["model"].startswith("Nemotron-H")]
    assert len(priced) == 2 * len(NEMOTRON_H)


def test_nemotron_h_cuda_graphs_follow_the_config_and_fsdp():
    raw = {"model": "Nemotron-H 56B", "gpu_type": "H100-SXM5-80GB", "precision": "FP8"}
    assert options_rules.cuda_graph_fields(raw, "25.07", fsdp=False) == {
        "cuda_graph_scopes": frozenset({"layer"})
    }
    assert options_rules.cuda_graph_fields(raw, "25.07", fsdp=True) == {}
    assert options_rules.cuda_graph_fields(raw, "25.04", fsdp=False) == {}
    assert options_rules.cuda_graph_fields(raw | {"gpu_type": "B200"}, "25.07", fsdp=False) == {}
    assert options_rules.cuda_graph_fields(raw | {"model": "Llama3 70B"}, "25.07", fsdp=False) == {}


def test_nemotron_h_settings_cite_their_nemo_sources():
    doc = rules.__doc__
    for source in ("pretrain_nemotronh_", "nemotron_h_bf16_with_fp8_current_scaling_mixed"):
        assert source in doc
    assert "_get_optimizer_overlap_cfgs" in doc and "first_last_layers_bf16" in doc
    assert "set_cuda_graph_configs" in inspect.getsource(options_rules)
    assert ("nemotronh", "25.07") in rules.TP_OVERLAP_FAMILIES
    assert ("nemotronh", "25.07") in options_rules.CUDA_GRAPH_FAMILIES


H100 = {"gpu_type": "H100-SXM5-80GB"}


@pytest.mark.parametrize(
    ("release", "model", "precision", "gpu", "expandable"),
    [
        # executors.py slurm_executor (v2.4.0, v2.5.0rc0): expandable_segments:True on H100.
        ("25.07", "Nemotron-H 8B", "FP8", "H100-SXM5-80GB", True),
        ("25.09", "Llama3 70B", "BF16", "H100-SXM5-80GB", True),
        ("25.07", "Llama3 8B", "BF16", "H100-SXM5-80GB", True),
        # PerfEnvPlugin removes it: Llama 3 8B FP8 registers NCCL user buffers (CSV column 1).
        ("25.07", "Llama3 8B", "FP8", "H100-SXM5-80GB", False),
        # v2.3.0 utils.py sets no PYTORCH_CUDA_ALLOC_CONF.
        ("25.04", "Nemotron4 15B", "FP8", "H100-SXM5-80GB", False),
        # other GPUs' configuration files are not read here.
        ("25.07", "Nemotron-H 8B", "FP8", "B200", False),
    ],
)
def test_expandable_segments_follow_the_launch_of_each_release(
    release, model, precision, gpu, expandable
):
    raw = {"model": model, "precision": precision, "gpu_type": gpu}
    fields = options_rules.allocator_fields(raw, release)
    assert fields.get("expandable_segments", False) is expandable


def test_nemo_rows_carry_the_allocator_setting_into_their_options():
    raw = {
        "model": "Nemotron-H 8B",
        "precision": "FP8",
        "source_version": "NeMo 25.07 container",
        "source_id": "NEMO-PERF-25.07",
    } | H100
    assert options_rules.nemo_option_fields(raw, False)["expandable_segments"] is True
    llama = raw | {"model": "Llama3 8B"}
    assert "expandable_segments" not in options_rules.nemo_option_fields(llama, False)


MIB = 2**20
NEMOTRON_H_8B_ACTIVATIONS_MIB = 24 * 706.25 + 24 * 600 + 4 * 289
"""Nemotron-H 8B's 52 layers at micro-batch 1, sequence 8192 (T), tp 1, FP8 delayed scaling
(1-byte inputs saved for the wgrad GEMMs), no dropout: 24 Mamba-2 layers of 706.25 MiB
(fused norm input 2·T·4096 = 64, in_proj FP8 input 32, zxBCdt 2·T·18560 = 290 and out_x
2·T·8192 = 128 saved by mamba_ssm's ``MambaSplitConv1dScanCombinedFn``, the RMSNorm's
input 128 and fp32 rstd 4·T·8 = 0.25, out_proj FP8 input 64), 24 MLP layers of 600 MiB
(norm input 64, FP8 fc1 input 32, the squared ReLU's bf16 relu output 2·T·21504 = 336, FP8
fc2 input 168), 4 attention layers of 289 MiB (norm input 64, FP8 QKV input 32, Q, K, V
2·T·6144 = 96, log-sum-exp 4·32·T = 1, output 64 and its FP8 copy 32)."""
NEMOTRON_H_8B_OUTPUT_MIB = 2048 + 64 + 64
"""The bf16 logits Transformer Engine's fused cross entropy keeps, 2·T·131072 (vocabulary
131072, tp 1), and the final norm's input and output, 2·T·4096 each."""


def test_nemotron_h_8b_fits_with_the_launch_s_expandable_segments():
    _skip_without_dev_rows()
    config = next(c for c in _nemotron_h() if c.model == "Nemotron-H 8B")
    case, est = bench.row_estimate(bench.table_row(config, "25.07"))
    assert case.options.expandable_segments
    (stage,) = est.memory
    assert stage.activations_bytes == pytest.approx(NEMOTRON_H_8B_ACTIVATIONS_MIB * MIB)
    assert stage.output_activations_bytes == pytest.approx(NEMOTRON_H_8B_OUTPUT_MIB * MIB)
    # FrameworkAllowance: 1.5 GiB plus 5% (expandable segments) of the dynamic bytes.
    dynamic = (NEMOTRON_H_8B_ACTIVATIONS_MIB + NEMOTRON_H_8B_OUTPUT_MIB) * MIB
    assert stage.framework_bytes == pytest.approx(1.5 * 2**30 + 0.05 * dynamic, rel=1e-4)
    # weights (FP8 data and transpose, bf16 elsewhere) and bf16 gradients: 2 bytes each per
    # parameter; Adam's 12 bytes sharded over dp 8.
    assert stage.weights_bytes == pytest.approx(stage.gradients_bytes)
    assert stage.optimizer_bytes == pytest.approx(stage.gradients_bytes * 12 / 2 / 8)
    assert est.fits and est.peak_memory_gib == pytest.approx(78.56, abs=0.01)
    parts = bench.price(config, "25.07")["peak_parts_gib"]
    assert parts["framework"] == pytest.approx(stage.framework_bytes / 2**30, abs=1e-3)
    assert sum(parts.values()) == pytest.approx(est.peak_memory_gib, abs=0.01)
