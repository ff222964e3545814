"""The ``megatron`` runtime: Megatron-core with Transformer Engine, as exported plans run.

Kernels are priced from the profile's GEMM, attention and memory curves with Megatron's
fusions (`costmodel.runtimes.megatron.layer_costs`), the iteration's Megatron-specific
parts in `costmodel.runtimes.megatron.pricing` (chunk costs, pipeline sends) and
`costmodel.runtimes.megatron.stage_tail` (a stage's work after its last backward), the
planner's closed-form screen in `costmodel.runtimes.megatron.screen`;
`costmodel.runtimes.megatron.runtime` binds them to the `costmodel.runtime.RuntimeModel`
protocol. Memory is `costmodel.memory`.
"""
