"""One launcher for every multi-process job of paraplan (training runs and profiling worlds):
`launch.world.launch`, with its failure report `launch.world.LaunchError`. Imports only
``specs`` (machine facts and errors), so both the executor and the profiler may use it."""
