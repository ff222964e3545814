"""Defaults of the plan search that the command line states in its help.

A module of constants only (no pandas, no cost model), so that `paraplan plan --help` can
show them without loading the search.
"""

DEFAULT_HEADROOM = 0.05
"""Fraction of device memory a plan leaves free (`planner.search.memory_limit_bytes`): what no
model predicts exactly, such as allocator fragmentation and library workspaces."""
DEFAULT_MAX_MICRO_BATCH_SIZE = 8
"""Largest micro-batch size (sequences) a search tries (`planner.space.SearchSpace`)."""
