"""Trains a Llama-style GPT with a `specs.ParallelPlan` on torch.distributed and records
the measured `specs.Timeline` and metrics. Imports `specs` only: never the planner or the
cost model."""
