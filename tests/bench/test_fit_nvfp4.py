"""bench/validation_fit.py: NVFP4 rows fit a GEMM rate factor of their own per generation,
beside the FP8 one; a fit without NVFP4 rows gives each generation its FP8 factor. And the
NVFP4 recipe settings of the Megatron-Bridge rows (precision_recipes, overlap_recipes)."""

from __future__ import annotations

import pytest

from tests.bench.bench_loader import load_bench
from tests.bench.validation_cases import factor_predictor, factor_row

fitting = load_bench("validation_fit")
params = load_bench("validation_fit_params")
precision_recipes = load_bench("precision_recipes")
overlap = load_bench("overlap_recipes")

GRID = params.FitGrid(
    fp8_factors=tuple(round(1.0 - 0.05 * i, 2) for i in range(15)),
    host_launch_s=(0.0,),
)

# Synthetic dense rows: predicted seconds c + w / f at factor f; published seconds those of
# a known factor on the grid, FP8 and NVFP4 apart, per profile generation.
SHAPES = {"f1": (1.0, 2.0), "f2": (0.5, 3.0), "n1": (1.0, 2.0), "n2": (2.0, 1.0)}
TRUTH = {"fp8": 0.6, "nvfp4": 0.4}


_predict = factor_predictor(SHAPES)


def _row(row_id, source, precision):
    return factor_row(
        SHAPES, row_id, source, TRUTH[precision], precision=precision, fit_generation="blackwell"
    )


def _rows():
    return [
        _row("f1", "MBRIDGE-25.09", "fp8"),
        _row("f2", "MOEZOO-1", "fp8"),
        _row("n1", "MBRIDGE-26.02", "nvfp4"),
        _row("n2", "MBRIDGE-26.04", "nvfp4"),
    ]


def test_nvfp4_rows_key_their_generation_apart():
    assert _row("n1", "S-1", "nvfp4").fit_key == "blackwell/nvfp4"
    assert _row("f1", "S-1", "fp8").fit_key == "blackwell"


@pytest.mark.parametrize("per_generation", [True, False])
def test_fit_recovers_the_fp8_and_the_nvfp4_factor(per_generation):
    model = fitting.fit_model(_rows(), _predict, GRID, per_generation=per_generation)
    assert model.factor("blackwell") == TRUTH["fp8"]
    assert model.fp4_factors == {"blackwell": TRUTH["nvfp4"]}
    assert model.fp4_fitted_on == {"blackwell": ("n1", "n2")}
    assert model.factor("blackwell/nvfp4") == TRUTH["nvfp4"]
    # the FP8 rows alone fitted the FP8 factor
    assert model.fitted_on == ("f1", "f2")
    applied = fitting.apply_model(_rows(), _predict, model)
    assert [o.error for o in applied] == pytest.approx([0.0] * 4)


def test_without_nvfp4_rows_a_generation_takes_its_fp8_factor():
    _, models = fitting.leave_one_source_out(_rows(), _predict, GRID, per_generation=True)
    without_bridge = models["MBRIDGE"]
    assert without_bridge.fp4_factors == {}
    assert without_bridge.factor("blackwell/nvfp4") == without_bridge.factor("blackwell")
    assert without_bridge.factor("blackwell") == TRUTH["fp8"]


def test_bench_json_lists_the_nvfp4_factors_and_their_rows():
    report_mod = load_bench("validation_report")
    rows = [
        report_mod.Outcome(**{f: getattr(o, f) for f in o.__dataclass_fields__}) for o in _rows()
    ]
    result = report_mod.report(rows, [], _predict)
    assert result["fitted"]["fp4_gemm_rate_factor_by_generation"] == {"blackwell": 0.4}
    assert result["fitted"]["fp4_fitted_on_by_generation"] == {"blackwell": ["n1", "n2"]}
    assert result["fitted"]["fp8_gemm_rate_factor_by_generation"] == {"blackwell": 0.6}
    assert result["loso"]["fp4_gemm_rate_factor_by_left_out_source"]["MBRIDGE"] == {}
    docs = load_bench("validation_docs")
    line = docs.fp4_line(result)
    assert "blackwell 0.4 (rows n1, n2)" in line


LLAMA405_GB200 = {
    "source_id": "MBRIDGE-26.06",
    "model": "LLAMA3.1_405B",
    "gpu_type": "GB200 (NVL72)",
    "precision": "NVFP4",
}


@pytest.mark.parametrize(
    ("source", "expected"),
    # bf16_with_nvfp4_mixed sets fp4_param_gather from v0.5.0 (26.06) on
    [("MBRIDGE-26.04", False), ("MBRIDGE-26.04.01", False), ("MBRIDGE-26.06", True)],
)
def test_nvfp4_parameters_follow_the_release(source, expected):
    row = LLAMA405_GB200 | {"source_id": source}
    assert precision_recipes.fp4_weight_fields(row) == {"fp4_param": expected}
    assert precision_recipes.fp4_weight_fields(row | {"precision": "MXFP8"}) == {}


@pytest.mark.parametrize("model", ["Nemotron_3_Super", "DeepSeekV3", "GPT OSS 120B"])
def test_nvfp4_parameters_stay_bf16_where_the_model_recipe_turns_them_off(model):
    # v0.5.0 scripts/performance/configs/{nemotronh,deepseek,gpt_oss}: fp4_param_gather = False
    row = LLAMA405_GB200 | {"model": model}
    assert precision_recipes.fp4_weight_fields(row) == {"fp4_param": False}


def test_nvfp4_llama_recipes_turn_tp_overlap_off():
    assert overlap.tp_overlap(LLAMA405_GB200 | {"precision": "MXFP8"}, 4, True)
    assert not overlap.tp_overlap(LLAMA405_GB200, 4, True)


def test_405b_gb200_nvfp4_of_26_06_does_not_overlap_the_parameter_gather():
    assert not overlap.param_gather_overlapped(LLAMA405_GB200)
    assert overlap.param_gather_overlapped(LLAMA405_GB200 | {"precision": "MXFP8"})
    assert overlap.param_gather_overlapped(LLAMA405_GB200 | {"source_id": "MBRIDGE-26.04"})
    assert overlap.param_gather_overlapped(LLAMA405_GB200 | {"gpu_type": "GB300 (NVL72)"})


@pytest.mark.parametrize(
    ("source", "expected"),
    # TE pins: v0.3.0 and v0.3.1 5671fd36 (two casts), v0.4.0 71bbefbf and v0.5.0 4220403e
    # (nvte_quantize_with_hadamard_transform, one kernel)
    [
        ("MBRIDGE-26.02", False),
        ("MBRIDGE-26.02.01", False),
        ("MBRIDGE-26.04", True),
        ("MBRIDGE-26.06", True),
    ],
)
def test_nvfp4_cast_kernels_follow_the_release(source, expected):
    row = LLAMA405_GB200 | {"source_id": source}
    assert precision_recipes.nvfp4_cast_fields(row) == {"nvfp4_fused_rht_cast": expected}
    assert precision_recipes.nvfp4_cast_fields(row | {"precision": "MXFP8"}) == {}
