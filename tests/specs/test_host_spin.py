"""The OpenMP wait policy of spawned CPU ranks (`specs.host.spin_wait_env`)."""

from __future__ import annotations

import os

from specs.host import SPIN_WAIT, spawn_environment, spin_wait_env


def test_only_cpu_ranks_of_several_threads_spin_unless_the_user_chose():
    assert spin_wait_env(2, False, {}) == SPIN_WAIT
    assert spin_wait_env(1, False, {}) == {}
    assert spin_wait_env(8, True, {}) == {}
    assert spin_wait_env(2, False, {"OMP_WAIT_POLICY": "PASSIVE"}) == {}


def test_the_spawn_environment_is_restored(monkeypatch):
    monkeypatch.delenv("PARAPLAN_TEST_A", raising=False)
    monkeypatch.setenv("PARAPLAN_TEST_B", "old")
    with spawn_environment({"PARAPLAN_TEST_A": "1", "PARAPLAN_TEST_B": "new"}):
        assert os.environ["PARAPLAN_TEST_A"] == "1" and os.environ["PARAPLAN_TEST_B"] == "new"
    assert "PARAPLAN_TEST_A" not in os.environ and os.environ["PARAPLAN_TEST_B"] == "old"
