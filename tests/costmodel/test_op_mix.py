"""The operator-mix factor on the per-operator host figures
(`costmodel.runtimes.torch.op_mix_rates`)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from costmodel.runtimes.torch.op_mix_rates import SCALED_FIELDS, _priced_s, op_mix_factor
from costmodel.runtimes.torch.rates import host_rates
from tests.costmodel.cpu_fixture import cpu_profile, spread

RATES = host_rates(cpu_profile())


def _apart() -> float:
    return _priced_s(dataclasses.replace(RATES, **{f: 0.0 for f in SCALED_FIELDS}))


def test_a_profile_without_the_probe_keeps_its_figures():
    assert RATES.op_mix == 1.0
    assert op_mix_factor(RATES, 0.0, 0.0) == 1.0  # nothing measured: nothing to compare


def test_a_chain_measured_at_the_priced_cost_leaves_the_figures_alone():
    priced = _priced_s(RATES)
    assert op_mix_factor(RATES, priced, RATES.backward_call_s) == pytest.approx(1.0)


@given(k=st.floats(min_value=0.3, max_value=5.0))
def test_the_scaled_figures_price_the_chain_at_its_measurement(k):
    per_op = _priced_s(RATES) - _apart()
    measured = _apart() + k * per_op  # forward and backward together, call apart
    profile = cpu_profile(
        extra=(
            spread("op_overhead.op_mix_forward", measured / 2),
            spread("op_overhead.op_mix_backward", measured / 2 + RATES.backward_call_s),
        )
    )
    rates = host_rates(profile)
    assert rates.op_mix == pytest.approx(k, rel=1e-9)
    for field in SCALED_FIELDS:
        assert getattr(rates, field) == pytest.approx(k * getattr(RATES, field), rel=1e-9)
    # figures timed on their own operators keep theirs
    assert rates.routing_op_s == RATES.routing_op_s
    assert rates.backward_call_s == RATES.backward_call_s
    assert _priced_s(rates) == pytest.approx(measured, rel=1e-9)
