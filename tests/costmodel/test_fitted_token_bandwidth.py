"""`costmodel.fitted_rates.MOE_TOKEN_DEVICE_HBM_GBPS`: the bandwidth the fitted device time
per token is stated at is that of every shipped profile of the generations that fitted it,
so the fit's own rows take the fitted figure unscaled."""

from __future__ import annotations

import pytest

from costmodel.fitted_rates import (
    MOE_FIT_GENERATIONS,
    MOE_TOKEN_DEVICE_HBM_GBPS,
    token_device_s,
)
from profiles.store import load_profile, stored_profile_names


def test_every_profile_of_the_fitted_generations_has_the_stated_bandwidth():
    fitted = [
        profile
        for profile in map(load_profile, stored_profile_names())
        if profile.device.generation in MOE_FIT_GENERATIONS
    ]
    assert len(fitted) >= 4  # B200, B300, GB200 NVL72, GB300 NVL72
    for profile in fitted:
        assert profile.device.hbm_GBps == MOE_TOKEN_DEVICE_HBM_GBPS, profile.name
        assert token_device_s(profile, 200e-9) == pytest.approx(200e-9)


def test_a_slower_memory_takes_proportionally_longer():
    a100 = load_profile("a100-sxm-80gb")
    assert token_device_s(a100, 100e-9) == pytest.approx(
        100e-9 * MOE_TOKEN_DEVICE_HBM_GBPS / a100.device.hbm_GBps
    )
    assert token_device_s(a100, 100e-9) > 3 * 100e-9
