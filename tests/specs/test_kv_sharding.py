"""`specs.kv_sharding`: which (key/value heads, tp) pairs Megatron-core takes and who
refuses the sub-sharded ones."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from specs.kv_sharding import (
    EXECUTOR_KV_RULE,
    executor_kv_refusal,
    kv_heads_fit_tp,
    kv_sub_sharded,
)
from specs.presets import get_preset


@given(st.integers(1, 64), st.integers(1, 64))
def test_fit_is_megatrons_multiple_or_divisor_rule(groups: int, tp: int) -> None:
    # TransformerConfig.__post_init__ (f7dfb99795): g % tp == 0 or tp % g == 0
    # whole heads per rank, or whole ranks per head: the larger a multiple of the smaller
    small, large = sorted((groups, tp))
    assert kv_heads_fit_tp(groups, tp) == (large % small == 0)


def test_sub_sharding_is_fewer_kv_heads_than_ranks() -> None:
    nano = get_preset("nemotron-3-nano")  # 2 key/value heads
    assert [tp for tp in (1, 2, 4, 8) if kv_sub_sharded(nano, tp)] == [4, 8]
    mla = get_preset("deepseek-v3")
    assert not kv_sub_sharded(mla, 128)


def test_the_executor_refusal_names_rule_values_and_fix() -> None:
    nano = get_preset("nemotron-3-nano")
    assert executor_kv_refusal(nano, 2, "torchtitan") is None
    message = executor_kv_refusal(nano, 4, "torchtitan")
    assert message is not None
    for part in (EXECUTOR_KV_RULE, "2 key/value heads", "tp is 4", "torchtitan", "tp <= 2"):
        assert part in message
