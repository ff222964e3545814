"""The fidelity benchmark's profiles (`bench/fidelity.py`): several quick profiles of each
world size taken across the rounds, and their median.

One quick profile is one draw of a shared host's spells: on the 2-core reference VM four
profiles of the same code, taken one after another, predicted the suite's 1-rank plan from
-34% to +73% and its tensor-parallel plan from -20% to +8% of what the same runs measured
(each with the same calibration runs). The median of three draws (`profiles.merge`)
moved those to -2..+13% and -3..+2%. So the bench takes ``Settings.draws`` profiles of
every world size it times, spread over the rounds like the runs (before the first round,
between rounds, after the last), and predicts every plan on their median, written where a
single profile was (``WORK/profile.json`` for 2 ranks, ``WORK/profile-<n>.json`` otherwise).

bench/ is not a package: `bench/fidelity.py` imports this file as a sibling script does.
"""

from __future__ import annotations

from pathlib import Path

from fidelity_suite import Profiles, Settings
from rich.console import Console

from paraplan.commands.demo import ensure_profile
from profiles.merge import median_profile
from profiles.schema import HardwareProfile
from profiles.store import load_profile, save_profile


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

    def __init__(self, settings: Settings, worlds: tuple[int, ...], log: Console) -> None:
        self.settings, self.worlds, self.log = settings, worlds, log
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
            self.taken[world].append(measured(path, world, self.log))


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
