"""The TP amax all-reduce of per-tensor current scaling
(costmodel.runtimes.megatron.fp8_scaling)."""

from __future__ import annotations

import pytest

from costmodel.collectives import collective_time_s
from costmodel.passes import ZERO
from costmodel.runtimes.megatron.fp8_scaling import AMAX_BYTES, amax_reduction_pair
from costmodel.topology import strided_group_placement
from profiles.store import load_profile

H100 = load_profile("h100-sxm-80gb")
TP8 = strided_group_placement(8, 1, gpus_per_node=8, scale_up_domain=8, nics_per_node=8)


def pair(recipe: str, *, sp: bool = True, group=TP8, row_parallel: bool = True):
    return amax_reduction_pair(
        H100, recipe=recipe, sequence_parallel=sp, tp_group=group, row_parallel=row_parallel
    )


def test_current_scaling_reduces_one_amax_each_way_with_sequence_parallelism():
    # Forward: the column-parallel input's amax; backward: the row-parallel output
    # gradient's; one fp32 all-reduce over the TP group each, all exposed.
    one = collective_time_s(H100, "all_reduce", AMAX_BYTES, TP8)
    forward, backward = pair("tensorwise")
    for cost in (forward, backward):
        assert cost.tp_s == cost.tp_exposed_s == pytest.approx(one)
        assert cost.tp_bytes == AMAX_BYTES
    assert AMAX_BYTES == 4


def test_no_amax_reduction_without_sequence_parallelism_or_per_tensor_current_scaling():
    assert pair("tensorwise", sp=False) == (ZERO, ZERO)
    assert pair("delayed") == (ZERO, ZERO)
    assert pair("mxfp8") == (ZERO, ZERO)
    single = strided_group_placement(1, 1, gpus_per_node=8, scale_up_domain=8, nics_per_node=8)
    assert pair("tensorwise", group=single) == (ZERO, ZERO)


def test_a_pair_without_its_own_row_parallel_gemm_reduces_only_forward():
    forward, backward = pair("tensorwise", row_parallel=False)
    assert forward.tp_s > 0
    assert backward == ZERO
