"""The runtime models behind `costmodel.runtime.RuntimeModel`: ``megatron``
(`costmodel.runtimes.megatron`) and ``torch`` (`costmodel.runtimes.torch`);
`costmodel.runtimes.registry.runtime_model` picks one from `ExecutionOptions.runtime`."""
