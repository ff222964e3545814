"""FP8 quantization passes from a hardware profile (costmodel.fp8_quantization)."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel import compute as ops
from costmodel.fp8_quantization import (
    fp8_amax_time_s,
    fp8_cast_bytes_per_element,
    fp8_quantize_time_s,
    norm_quantization,
)
from profiles.lookup import memory_bandwidth_Bps
from profiles.store import load_profile
from specs.errors import SpecError

H100 = load_profile("h100-sxm-80gb")


def test_fp8_quantize_writes_both_copies():
    # cast_transpose: read the bf16 operand (2 bytes), write the row-wise and the
    # column-wise fp8 copies (1 + 1); the norm-fused input adds only the transpose's net byte.
    elements, bw = 4096 * 8192, memory_bandwidth_Bps(H100)
    assert fp8_quantize_time_s(H100, elements, 2, recipe="delayed") == pytest.approx(
        4 * elements / bw
    )
    fused = fp8_quantize_time_s(H100, elements, 2, recipe="delayed", norm="fused")
    assert fused == pytest.approx(elements / bw)


def test_current_scaling_quantize_adds_the_amax_read():
    # TE current_scaling.cu: amax_kernel reads the bf16 operand once (e bytes per element)
    # before the cast; delayed and MXFP8 scales come with the cast, no extra pass.
    elements, bw = 4096 * 8192, memory_bandwidth_Bps(H100)
    delayed = fp8_quantize_time_s(H100, elements, 2, recipe="delayed")
    tensorwise = fp8_quantize_time_s(H100, elements, 2, recipe="tensorwise")
    mxfp8 = fp8_quantize_time_s(H100, elements, 2, recipe="mxfp8")
    assert tensorwise - delayed == pytest.approx(2 * elements / bw)
    assert mxfp8 == delayed == pytest.approx(4 * elements / bw)


@pytest.mark.parametrize(
    ("recipe", "cudnn_norm", "path", "bytes_per_element"),
    [
        # FULLY_FUSED on either backend: the norm writes fp8, a transpose adds the column copy.
        ("delayed", False, "fused", 1),
        ("delayed", True, "fused", 1),
        # TE's default: bf16 norm, then the MXFP8 cast (read e, write both copies).
        ("mxfp8", False, "separate", 4),
        # cuDNN's fused MXFP8 norm writes both copies in place of the bf16 output.
        ("mxfp8", True, "fused", 0),
        # FUSED_NORM_AMAX_FP8: bf16 + amax from the norm, then the cast.
        ("tensorwise", False, "fused_amax", 4),
        # cuDNN has no amax output: bf16 norm, then the full quantize (amax pass + cast).
        ("tensorwise", True, "separate", 4),
    ],
)
def test_norm_output_quantization_per_recipe_and_backend(
    recipe, cudnn_norm, path, bytes_per_element
):
    assert norm_quantization(recipe, cudnn_norm=cudnn_norm, rows=4096, hidden=8192) == path
    assert fp8_cast_bytes_per_element(2, recipe=recipe, norm=path) == bytes_per_element


def test_norm_output_quantize_times_per_recipe_and_backend():
    # Beyond the bf16 norm, with e = 2: delayed 3 - e = 1 byte; MXFP8 4 (TE's norm) or
    # 0 (cuDNN); current scaling 4 (cast of the norm's bf16 output, amax from the norm) or
    # 4 + 2 with cuDNN (the amax pass reads the bf16 output again).
    elements, bw = 4096 * 8192, memory_bandwidth_Bps(H100)

    def norm_output(recipe: str, cudnn_norm: bool) -> float:
        path = norm_quantization(recipe, cudnn_norm=cudnn_norm, rows=4096, hidden=8192)
        return fp8_quantize_time_s(H100, elements, 2, recipe=recipe, norm=path)

    expected = {
        ("delayed", False): 1,
        ("delayed", True): 1,
        ("mxfp8", False): 4,
        ("mxfp8", True): 0,
        ("tensorwise", False): 4,
        ("tensorwise", True): 6,
    }
    for (recipe, cudnn_norm), per_element in expected.items():
        assert norm_output(recipe, cudnn_norm) == pytest.approx(per_element * elements / bw)


@pytest.mark.parametrize(("rows", "hidden"), [(4096 + 64, 8192), (4096, 2880)])
def test_cudnn_mxfp8_norm_needs_full_tiles(rows, hidden):
    # normalization.cpp: the cuDNN MXFP8 kernel requires full 128x128 tiles, else UNFUSED.
    path = norm_quantization("mxfp8", cudnn_norm=True, rows=rows, hidden=hidden)
    assert path == "separate"


def test_norm_paths_of_another_recipe_are_refused():
    with pytest.raises(SpecError, match="no fused norm"):
        fp8_cast_bytes_per_element(2, recipe="tensorwise", norm="fused")
    with pytest.raises(SpecError, match="current scaling's path"):
        fp8_cast_bytes_per_element(2, recipe="mxfp8", norm="fused_amax")
    with pytest.raises(SpecError, match="fp8 recipe must be one of"):
        norm_quantization("blockwise", cudnn_norm=False, rows=128, hidden=128)  # type: ignore[arg-type]


def test_current_scaling_launches_the_amax_and_scale_kernels():
    # zero_amax_kernel + amax_kernel + compute_scale_from_amax_kernel before the cast; the
    # norm-fused path keeps the amax zero-fill and the scale kernel.
    launch = 1e-5
    cpu = dataclasses.replace(H100, compute=dataclasses.replace(H100.compute, op_overhead_s=launch))
    elements = 1024.0
    plain = fp8_amax_time_s(cpu, elements, 2, recipe="tensorwise")
    read = ops.memory_bound_time_s(cpu, 2 * elements)
    assert plain == pytest.approx(read + 2 * launch)
    norm = fp8_amax_time_s(cpu, elements, 2, recipe="tensorwise", norm="fused_amax")
    assert norm == pytest.approx(2 * launch)
    # The cuDNN norm's separate path runs the whole pass again.
    separate = fp8_amax_time_s(cpu, elements, 2, recipe="tensorwise", norm="separate")
    assert separate == pytest.approx(plain)
    assert fp8_amax_time_s(cpu, elements, 2, recipe="delayed") == 0.0


def test_fp8_quantize_refuses_an_unknown_recipe():
    with pytest.raises(SpecError, match="fp8 recipe must be one of"):
        fp8_quantize_time_s(H100, 1024.0, 2, recipe="blockwise")  # type: ignore[arg-type]
