"""Pure cost functions: FLOPs, memory per rank, op and collective times from a hardware
profile, pipeline schedules, and the event simulator that turns a plan into a predicted
`specs.Timeline` and an `Estimate`."""
