"""The fidelity benchmark's profiles (`bench/fidelity.py`): several quick profiles of each
world size taken across the rounds, and their median.

One quick profile is one draw of a shared host's spells: profiles of the same code taken
one after another on a shared host can move a plan's prediction by tens of percent, and the
median of several draws (`profiles.merge`) moves far less. So the bench takes
``Settings.draws`` profiles of every world size it times, spread over the rounds like the
runs (before the first round, between rounds, after the last), and predicts every plan on
their median, written where a single profile was (``WORK/profile.json`` for 2 ranks,
``WORK/profile-<n>.json`` otherwise).
A draw during which the hypervisor took more than `fidelity_suite.STEAL_LIMIT` of the
machine's CPU is set aside and drawn again, as a run is: a draw taken in a spell of steal
reads the ranks' arrival skew (`sync_wait`) and the collective extras high.

bench/ is not a package: `bench/fidelity.py` imports this file as a sibling script does.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fidelity_suite import MAX_SET_ASIDE, STEAL_LIMIT, Profiles, Settings
from rich.console import Console

from paraplan.commands.demo import ensure_profile
from profiles.merge import median_profile
from profiles.schema import HardwareProfile
from profiles.store import load_profile, save_profile
from specs.host import steal_fraction, stolen_cpu_s


def profile_path(settings: Settings, world: int) -> Path:
    """The profile plans of ``world`` ranks are predicted on (the median of the draws)."""
    return settings.work / ("profile.json" if world == 2 else f"profile-{world}.json")


def draw_path(settings: Settings, world: int, index: int) -> Path:
    """Draw ``index`` of the ``world``-rank profile (the profile itself with one draw)."""
    if settings.draws == 1:
        return profile_path(settings, world)
    return settings.work / "profiles" / f"profile-{world}.draw{index + 1}.json"


def draw_rounds(repeats: int, draws: int) -> list[int]:
    """The round before which each draw is taken (``repeats``: after the last round),
    spread evenly from before the first round to after the last."""
    if draws == 1:
        return [0]
    return [round(i * repeats / (draws - 1)) for i in range(draws)]


def measured(path: Path, world: int, log: Console) -> HardwareProfile:
    """The quick profile at ``path``, measured now unless a profile of this host is there."""
    profile = ensure_profile(path, world, log)
    if profile is None:
        raise SystemExit(f"profiling {world} ranks into {path} failed; see above")
    return profile


class ProfileDraws:
    """The draws of every world size: `before_round` takes those due before a round (the
    hook of `fidelity_rounds.measure_rounds`), `merged` the rest and returns the medians."""

    def __init__(
        self,
        settings: Settings,
        worlds: tuple[int, ...],
        log: Console,
        set_aside: list[dict[str, Any]] | None = None,
        steal: Callable[[], float | None] = stolen_cpu_s,
    ) -> None:
        """``set_aside`` lists the draws set aside for steal (as `fidelity_rounds` lists
        runs); ``steal`` reads the machine's stolen CPU seconds (`specs.host`)."""
        self.settings, self.worlds, self.log = settings, worlds, log
        self.set_aside, self.steal = set_aside, steal
        self.due = draw_rounds(settings.repeats, settings.draws)
        self.taken: dict[int, list[HardwareProfile]] = {world: [] for world in worlds}

    def paths(self) -> dict[int, str]:
        """Every world size's profile path, known before the profile is."""
        return {world: str(profile_path(self.settings, world)) for world in self.worlds}

    def before_round(self, round_index: int) -> None:
        """Take the draws due before round ``round_index`` (0-based) that are not taken."""
        for index, due in enumerate(self.due):
            if due <= round_index:
                self._take(index)

    def merged(self) -> Profiles:
        """Take every remaining draw; each world size's median profile, saved at
        `profile_path` (the single draw itself with ``Settings.draws`` 1)."""
        for index in range(len(self.due)):
            self._take(index)
        profiles: Profiles = {}
        for world, draws in self.taken.items():
            path = profile_path(self.settings, world)
            if len(draws) > 1:
                command = "bench/fidelity.py: median of " + ", ".join(
                    str(draw_path(self.settings, world, i)) for i in range(len(draws))
                )
                save_profile(median_profile(draws, command=command, name=path.stem), path)
                self.log.print(f"  {world}-rank profile: median of {len(draws)} draws, {path}")
            profiles[world] = (str(path), draws[0] if len(draws) == 1 else load_profile(str(path)))
        return profiles

    def _take(self, index: int) -> None:
        for world in self.worlds:
            if len(self.taken[world]) > index:
                continue
            path = draw_path(self.settings, world, index)
            self.log.print(f"  profile draw {index + 1}/{len(self.due)} of {world} ranks: {path}")
            self.taken[world].append(self._quiet(path, world))

    def _quiet(self, path: Path, world: int) -> HardwareProfile:
        """The draw at ``path``, drawn again (the stolen one moved to ``<path>.stolen<k>``)
        while the hypervisor took more than `STEAL_LIMIT` of the CPU during it, at most
        `MAX_SET_ASIDE` times; the last draw is kept."""
        drawn = 0
        while True:
            before, start = self.steal(), time.perf_counter()
            profile = measured(path, world, self.log)
            after, wall_s = self.steal(), time.perf_counter() - start
            if before is None or after is None or drawn == MAX_SET_ASIDE:
                return profile
            share = steal_fraction(after - before, wall_s, os.cpu_count() or 1)
            if share <= STEAL_LIMIT:
                return profile
            drawn += 1
            aside = path.with_name(f"{path.name}.stolen{drawn}")
            path.replace(aside)
            if self.set_aside is not None:
                self.set_aside.append(
                    {"name": path.stem, "seconds": wall_s, "steal": share, "folder": str(aside)}
                )
            self.log.print(f"  set aside ({share:.2%} of the CPU stolen), drawn again: {aside}")


def measured_profiles(settings: Settings, worlds: tuple[int, ...], log: Console) -> Profiles:
    """One quick profile per world size (`profile_path`), each reused while it was measured
    on this host: the coverage plans' profiles, taken once."""
    return {
        world: (
            str(profile_path(settings, world)),
            measured(profile_path(settings, world), world, log),
        )
        for world in worlds
    }
