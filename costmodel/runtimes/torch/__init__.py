"""The ``torch`` runtime: paraplan's executor (eager PyTorch, DTensor tensor and sequence
parallelism, DDP or FSDP2, torch.distributed.pipelining).

Every operator the executor issues is priced (`costmodel.runtimes.torch.layers`,
`moe`, `ops`, `passes`): its kernel from the profile's curves plus, on a CPU profile, the
host costs the profile measured (`host_rates` and the ``*_rates`` modules that read the
in-context probes); its collectives as DTensor, DDP and FSDP2 issue them (`sync`). The
iteration's torch-specific parts are in `pricing`, memory in `memory`, the planner's
screen in `screen`; `costmodel.runtimes.torch.runtime` binds them to the
`costmodel.runtime.RuntimeModel` protocol.
"""
