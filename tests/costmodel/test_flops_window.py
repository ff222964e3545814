"""Sliding-window attention FLOPs (costmodel.flops)."""

from __future__ import annotations

import pytest

from costmodel.flops import (
    attended_keys_per_token,
    core_attention_forward_flops_per_token,
    forward_flops_per_token,
    layer_forward_flops_per_token,
)
from specs.presets import get_preset


def test_attended_keys_hand_worked() -> None:
    # s = 4, w = 2: queries see 1, 2, 2, 2 keys -> 7 / 4.
    assert attended_keys_per_token(4, 2) == pytest.approx(7 / 4)
    assert attended_keys_per_token(4096, None) == 2048
    assert attended_keys_per_token(64, 128) == 32  # window wider than the sequence


def test_windowed_layer_costs_a_fraction_of_a_full_one() -> None:
    model = get_preset("gpt-oss-120b")
    s = 4096
    full = core_attention_forward_flops_per_token(model, s)
    windowed = layer_forward_flops_per_token(model, 0, s).core_attention_flops
    assert layer_forward_flops_per_token(model, 1, s).core_attention_flops == full
    # 128-key window: (128·129/2 + (4096-128)·128) / 4096 keys against 2048
    keys = (128 * 129 / 2 + (4096 - 128) * 128) / 4096
    assert windowed == pytest.approx(full * keys / 2048)


def test_model_forward_sums_windowed_and_full_layers() -> None:
    model = get_preset("gpt-oss-20b")
    s = 8192
    per_layer = sum(layer_forward_flops_per_token(model, i, s).total_flops for i in range(24))
    unwindowed = model.replace(sliding_window=None)
    assert forward_flops_per_token(model, s) < forward_flops_per_token(unwindowed, s)
    logits = forward_flops_per_token(model, s) - per_layer
    assert logits == pytest.approx(
        forward_flops_per_token(unwindowed, s)
        - sum(layer_forward_flops_per_token(unwindowed, i, s).total_flops for i in range(24))
    )
