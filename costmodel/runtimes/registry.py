"""`runtime_model`: the runtime model an `ExecutionOptions` names."""

from __future__ import annotations

from costmodel.execution import ExecutionOptions
from costmodel.runtime import RuntimeModel
from costmodel.runtimes.megatron.runtime import MegatronRuntime
from costmodel.runtimes.torch.runtime import TorchRuntime


def runtime_model(options: ExecutionOptions) -> RuntimeModel:
    """`MegatronRuntime` or `TorchRuntime` by ``options.runtime``, built from ``options``."""
    if options.runtime == "torch":
        return TorchRuntime(options=options)
    return MegatronRuntime(options=options)
