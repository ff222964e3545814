"""GEMM time by shape at equal work: the depth factor against published cuBLAS rates.

Source of every rate below: OpenXLA's default matmul performance table,
``xla/service/gpu/model/matmul_interpolator_data.h`` (``kDefaultMatmulPTable``), in TFLOP/s
(the table's FLOP/s / 1e12, rounded to 0.1): the ``sm_100_B200`` entries (bf16 x bf16 ->
bf16 and f8e4m3fn x f8e4m3fn -> bf16; ROCm/xla mirror at 63ce2981) and the ``sm_90`` bf16
entries (tensorflow/tensorflow ``third_party/xla`` at 372d578b and 9bebee8e, the mean where
both regenerations list a shape), priced on the B200 and H100 SXM profiles. Each group holds shapes
of the same batch·2·m·n·k FLOPs; the FLOP-only curve prices them alike, the measured rates
differ by up to 1.5x, the shallow ones (small k) slowest. `gemm_depth_factor`
(`profiles.lookup.GEMM_DEPTH`) was fitted to these groups; the test checks that the GEMM
times of `costmodel.compute` reproduce each shape's time relative to the deepest shape of
its group within `TOLERANCE`.
"""

from __future__ import annotations

import pytest

from costmodel.compute import batched_gemm_time_s
from profiles.store import load_profile

TOLERANCE = 0.08
"""Largest relative error of a predicted time ratio (the worst B200 fp8 point is 7.6%
off: the table's fp8 rates scatter more between neighbouring shapes)."""

Shape = tuple[int, int, int, int, float]
"""(batch, m, n, k, measured TFLOP/s)."""

B200_FP8: tuple[tuple[Shape, ...], ...] = (
    ((1, 4096, 2048, 512, 871.3), (1, 4096, 1024, 1024, 850.8), (1, 4096, 512, 2048, 979.5)),
    (
        (1, 4096, 4096, 512, 1172.1),
        (1, 4096, 2048, 1024, 1332.2),
        (1, 4096, 1024, 2048, 1462.6),
        (1, 4096, 512, 4096, 1485.0),
    ),
    ((1, 4096, 4096, 1024, 1895.4), (1, 4096, 2048, 2048, 1833.5), (1, 4096, 1024, 4096, 1951.8)),
    ((1, 4096, 4096, 2048, 2485.0), (1, 4096, 2048, 4096, 2499.4)),
)
B200_BF16: tuple[tuple[Shape, ...], ...] = (
    (
        (1, 4096, 4096, 256, 514.7),
        (1, 4096, 2048, 512, 652.3),
        (1, 4096, 1024, 1024, 715.6),
        (1, 4096, 512, 2048, 762.4),
    ),
    (
        (1, 4096, 4096, 512, 805.3),
        (1, 4096, 2048, 1024, 913.8),
        (1, 4096, 1024, 2048, 990.3),
        (1, 4096, 512, 4096, 991.5),
    ),
    ((1, 4096, 4096, 1024, 1075.6), (1, 4096, 2048, 2048, 1170.0), (1, 4096, 1024, 4096, 1204.9)),
    ((1, 4096, 4096, 2048, 1277.8), (1, 4096, 2048, 4096, 1343.5)),
)
H100_BF16: tuple[tuple[Shape, ...], ...] = (
    (
        (4, 4096, 4096, 256, 505.1),
        (1, 4096, 4096, 1024, 681.1),
        (4, 4096, 1024, 1024, 673.5),
        (2, 2048, 4096, 1024, 678.7),
    ),
    (
        (4, 4096, 4096, 512, 620.8),
        (4, 2048, 2048, 2048, 725.7),
        (2, 2048, 4096, 2048, 726.4),
        (2, 4096, 1024, 4096, 750.6),
        (1, 4096, 2048, 4096, 764.1),
    ),
    ((2, 4096, 4096, 2048, 763.0), (1, 4096, 4096, 4096, 783.3), (2, 4096, 2048, 4096, 783.2)),
)
CASES = (
    [("b200", "fp8", group) for group in B200_FP8]
    + [("b200", "bf16", group) for group in B200_BF16]
    + [("h100-sxm-80gb", "bf16", group) for group in H100_BF16]
)


def _seconds(shape: Shape) -> float:
    batch, m, n, k, tflops = shape
    return 2.0 * batch * m * n * k / (tflops * 1e12)


@pytest.mark.parametrize(("profile_name", "dtype", "group"), CASES)
def test_equal_work_gemms_keep_the_published_time_ratios(profile_name, dtype, group) -> None:
    profile = load_profile(profile_name)
    deepest = max(group, key=lambda shape: shape[3])
    predicted_ref = batched_gemm_time_s(profile, *deepest[:4], dtype)
    for shape in group:
        predicted = batched_gemm_time_s(profile, *shape[:4], dtype) / predicted_ref
        measured = _seconds(shape) / _seconds(deepest)
        assert predicted == pytest.approx(measured, rel=TOLERANCE), shape


def test_a_shallow_gemm_costs_more_than_a_deep_one_of_the_same_work() -> None:
    # B200 fp8, 17.2 GFLOP each: k = 512 ran at 1172 TFLOP/s, k = 4096 at 1485 (table above).
    profile = load_profile("b200")
    shallow = batched_gemm_time_s(profile, 1, 4096, 4096, 512, "fp8")
    deep = batched_gemm_time_s(profile, 1, 4096, 512, 4096, "fp8")
    assert shallow / deep == pytest.approx(1485.0 / 1172.1, rel=TOLERANCE)
