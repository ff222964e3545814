"""The grid and the result of the published-runs validation's fits (`bench/validation_fit.py`).

- `FitGrid`: the candidate values of each fitted parameter (one value: a fixed input);
- `FittedModel`: the fitted parameters, per GPU generation where the fit has them, and the
  rows that fitted each; `FittedModel.factor` reads a fit key's low-precision factor
  (`is_fp4_key`: an NVFP4 row's key).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from validation_stats import FP4_SUFFIX


def is_fp4_key(key: str) -> bool:
    """Whether a fit key (`Outcome.fit_key`) is an NVFP4 row's (`FP4_SUFFIX`)."""
    return key.endswith(FP4_SUFFIX)


@dataclass(frozen=True, kw_only=True, slots=True)
class FitGrid:
    """Candidate values of the fitted parameters."""

    fp8_factors: tuple[float, ...]
    """Candidate `ExecutionOptions.fp8_gemm_rate_factor` values."""
    host_launch_s: tuple[float, ...]
    """Candidate `ExecutionOptions.moe_host_launch_s` values. One value is a fixed input,
    not a fitted one (`host_launch_fixed`): every fit prices the MoE rows with it, with or
    without MoE rows of its own, and none is listed as fitting it."""
    sustained_factors: tuple[float, ...] = (1.0,)
    """Candidate `ExecutionOptions.sustained_gemm_rate_factor` values."""
    token_device_s: tuple[float, ...] = (0.0,)
    """Candidate `ExecutionOptions.moe_token_device_s` values; one value is a fixed input of
    every fit (`token_device_fixed`), as for the launch time."""
    expert_launch_s: tuple[float, ...] = (0.0,)
    """Candidate `ExecutionOptions.moe_expert_launch_s` values (the launches Transformer
    Engine issues per local expert); one value is a fixed input of every fit
    (`expert_launch_fixed`), as for the launch time. Not read when `expert_launch_tied`."""
    expert_launch_tied: bool = False
    """The per-expert launch time equals the Python-level one at every fit point (one fitted
    launch time for both kinds, `validation_fit._coordinate_descent`)."""

    @property
    def host_launch_fixed(self) -> bool:
        """Whether the launch time is a fixed input (one candidate)."""
        return len(self.host_launch_s) == 1

    @property
    def expert_launch_fixed(self) -> bool:
        """Whether the per-expert launch time is a fixed input (one candidate, not tied)."""
        return not self.expert_launch_tied and len(self.expert_launch_s) == 1

    @property
    def token_device_fixed(self) -> bool:
        """Whether the device time per token is a fixed input (one candidate)."""
        return len(self.token_device_s) == 1


@dataclass(frozen=True, kw_only=True, slots=True)
class FittedModel:
    """The fitted parameters and the rows that fitted each."""

    fp8_factor: float | None
    """The FP8 factor fitted with one value shared by every generation (per generation: on
    the dense FP8 rows together, `validation_fit._shared_fp8`): the value of a generation
    without dense FP8 rows of its own. None when no FP8 row fitted it (the predictions keep
    the factor they were made with)."""
    fitted_on: tuple[str, ...]
    """Row ids of the FP8 rows that fitted ``fp8_factor``."""
    fp8_factors: dict[str, float] = dataclasses.field(default_factory=dict)
    """GPU generation -> its FP8 factor, for the generations with FP8 rows of their own
    (with ``per_generation`` off: empty, ``fp8_factor`` for every generation)."""
    fp8_fitted_on: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    """GPU generation -> row ids of the FP8 rows that fitted its factor (the dense FP8 rows
    of every generation where it takes the shared one)."""
    moe_host_launch_s: float | None = None
    """moe_host_launch_s for every GPU generation; 0 when no MoE row fitted it (no floor);
    the grid's one value when the grid fixes it (`FitGrid.host_launch_fixed`)."""
    host_fitted_on: tuple[str, ...] = ()
    """Row ids of the MoE rows that fitted it (and ``moe_token_device_s``)."""
    moe_expert_launch_s: float | None = None
    """moe_expert_launch_s for every GPU generation; 0 when no MoE row fitted it; the grid's
    one value when the grid fixes it (`FitGrid.expert_launch_fixed`); None: each row keeps
    its own."""
    expert_fitted_on: tuple[str, ...] = ()
    """Row ids of the MoE rows that fitted ``moe_expert_launch_s`` (none when the grid fixes
    it)."""
    moe_token_device_s: float | None = None
    """moe_token_device_s for every GPU generation; 0 when no MoE row fitted it; the grid's
    one value when the grid has one."""
    sustained_factor: float | None = None
    """The sustained 16-bit factor fitted with one value for every generation (all the
    dense 16-bit rows together): the value of a generation without dense 16-bit rows of its
    own. None when no dense 16-bit row fitted it (the predictions keep their own)."""
    sustained_factors: dict[str, float] = dataclasses.field(default_factory=dict)
    """GPU generation -> its sustained factor, for the generations with dense 16-bit rows."""
    sustained_fitted_on: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    """GPU generation -> row ids of the dense 16-bit rows that fitted its sustained factor;
    ``shared``: every dense 16-bit row (those that fitted ``sustained_factor``)."""
    fp4_factors: dict[str, float] = dataclasses.field(default_factory=dict)
    """GPU generation -> its NVFP4 factor, for the generations with NVFP4 rows."""
    fp4_fitted_on: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    """GPU generation -> row ids of the NVFP4 rows that fitted its NVFP4 factor."""

    def factor(self, generation: str) -> float | None:
        """The low-precision factor of a fit key: for an NVFP4 key (`is_fp4_key`) its
        generation's NVFP4 factor, else that generation's FP8 factor; for another key its
        FP8 factor, else the shared one."""
        if is_fp4_key(generation):
            base = generation.removesuffix(FP4_SUFFIX)
            return self.fp4_factors.get(base, self.factor(base))
        return self.fp8_factors.get(generation, self.fp8_factor)

    def sustained(self, generation: str) -> float | None:
        """The sustained 16-bit factor of ``generation``: its own, else the shared one."""
        return self.sustained_factors.get(generation, self.sustained_factor)
