"""Grouping of candidate tables by column values, for tables of millions of rows:
factorized columns and one mixed-radix code per row (`row_groups`), then first occurrences
by hashing (`first_occurrences`), rather than pandas merges or sorts. The screen
(`planner.screening`) and the memory floor (`planner.memory_floor`) compute once per group
and broadcast back to the rows with the group index.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def row_groups(table: pd.DataFrame, keys: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(first row position of each distinct ``keys`` combination, group of every row),
    groups numbered in order of first appearance, by factorizing each column into one
    mixed-radix code: a join key for millions of rows without a pandas merge."""
    code = np.zeros(len(table), dtype=np.int64)
    for key in keys:
        values, uniques = pd.factorize(table[key], sort=False)
        code = code * (len(uniques) + 1) + values
        if code.max(initial=0) > 2**40:  # keep the mixed-radix code far from overflow
            code = pd.factorize(code, sort=False)[0].astype(np.int64)
    return first_occurrences(code)


def first_occurrences(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(position of the first occurrence of each distinct value, group of every value),
    groups numbered in order of first appearance; hashing, not sorting."""
    group = pd.factorize(values, sort=False)[0]
    if not len(group):
        return np.zeros(0, dtype=np.int64), group
    seen = np.maximum.accumulate(group)
    first = np.flatnonzero(np.concatenate(([True], group[1:] > seen[:-1])))
    return first, group
