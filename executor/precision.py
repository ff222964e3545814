"""Compute precision of the executor: fp32 on CPU, bf16 autocast on CUDA, fp8 through
Transformer Engine.

Parameters, gradients and optimizer state stay fp32 in every mode (Megatron's fp32 main
weights and gradients); only the forward (and so the backward) math changes:
- ``fp32``: no autocast.
- ``bf16``: ``torch.autocast(dtype=bfloat16)`` on CUDA. CPU runs stay fp32: bf16 matmuls
  are slow on CPUs, and CPU runs exist to check correctness, not speed.
- ``fp8``: needs CUDA and ``transformer_engine`` (an optional extra; it cannot be installed
  on a CPU-only machine). The block linears become ``transformer_engine.pytorch.Linear``
  and the forward runs under ``fp8_autocast`` inside bf16 autocast. TE linears are not
  DTensor modules, so fp8 needs tp = 1.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable
from types import ModuleType

import torch
from torch import nn

from specs.errors import SpecError


def import_transformer_engine() -> ModuleType:
    """``transformer_engine.pytorch``, or a SpecError saying how to get it."""
    try:
        return importlib.import_module("transformer_engine.pytorch")
    except (ImportError, RuntimeError) as error:
        # An empty transformer-engine meta package raises RuntimeError on import.
        raise SpecError(
            "precision 'fp8' needs NVIDIA Transformer Engine, which is not importable here "
            f"({error.__class__.__name__}: {error}); install it on a CUDA machine with "
            "`pip install --no-build-isolation 'transformer-engine[pytorch]'` "
            "(the project's `gpu` extra) or run with precision 'bf16'"
        ) from error


EXECUTOR_NVFP4_RULE = "nvfp4_not_in_executor"
"""Rule id of `check_precision`'s refusal of nvfp4."""


def check_precision(precision: str, device: torch.device, tp: int) -> None:
    """Raise SpecError when ``precision`` cannot run on ``device`` with ``tp``; nvfp4 never
    runs here (`EXECUTOR_NVFP4_RULE`)."""
    if precision == "nvfp4":
        raise SpecError(
            f"[{EXECUTOR_NVFP4_RULE}] precision nvfp4 is priced for Megatron-core with "
            "Transformer Engine's NVFP4 recipe; paraplan's executor runs fp32, bf16 and fp8 "
            f"only (device {device.type}, tp={tp}): run the plan through `paraplan export "
            "--to megatron`, or use precision 'fp8'"
        )
    if precision not in ("fp32", "bf16", "fp8"):
        raise SpecError(f"unknown precision {precision!r}; valid: bf16, fp8, fp32")
    if precision != "fp8":
        return
    if device.type != "cuda":
        raise SpecError(
            f"precision 'fp8' needs a CUDA device, got {device.type}; use 'fp32' or 'bf16' "
            "(which runs as fp32 on CPU)"
        )
    if tp != 1:
        raise SpecError(
            f"precision 'fp8' runs Transformer Engine linears, which the DTensor tensor-parallel "
            f"plans cannot shard; got tp={tp}, use tp=1 or precision 'bf16'"
        )
    import_transformer_engine()


def forward_context(
    precision: str, device: torch.device
) -> Callable[[], contextlib.AbstractContextManager]:
    """A factory of the context every chunk's forward runs in."""
    if device.type != "cuda" or precision == "fp32":
        return contextlib.nullcontext
    if precision == "bf16":
        return lambda: torch.autocast("cuda", dtype=torch.bfloat16)
    te = import_transformer_engine()

    @contextlib.contextmanager
    def fp8_context():
        with torch.autocast("cuda", dtype=torch.bfloat16), te.fp8_autocast(enabled=True):
            yield

    return fp8_context


@torch.no_grad()
def swap_linears_for_fp8(module: nn.Module) -> None:
    """Replace the linears inside transformer blocks with Transformer Engine linears
    holding the same weights (embedding and output layer stay in torch)."""
    te = import_transformer_engine()
    for name, child in list(module.named_modules()):
        for attr, sub in list(child.named_children()):
            # Routers stay in torch: their E outputs need not meet fp8's multiple-of-16 shapes.
            if not isinstance(sub, nn.Linear) or not name.startswith("layers.") or attr == "router":
                continue
            fp8_linear = te.Linear(
                sub.in_features,
                sub.out_features,
                bias=sub.bias is not None,
                params_dtype=sub.weight.dtype,
                device=sub.weight.device,
            )
            fp8_linear.weight.copy_(sub.weight)
            if sub.bias is not None:
                fp8_linear.bias.copy_(sub.bias)
            setattr(child, attr, fp8_linear)
