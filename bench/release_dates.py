"""Release dates (year, month) of the stack versions a published row may name.

Read by `bench/row_era.py`. Each date is the month of the commit a release tag points to
(``git for-each-ref refs/tags --format='%(refname:short) %(creatordate:short)'``, and
``%(*committerdate:short)`` for annotated tags, whose own creation date can be a later
re-tagging: Megatron-LM's ``core_v0.8.0`` to ``core_v0.12.0`` were all tagged 2025-05-07)
in the local mirrors of NVIDIA/Megatron-LM and NVIDIA/TransformerEngine (2026-08 state).
Only minor releases are listed; a patch release is dated by its minor release.
"""

from __future__ import annotations

MEGATRON_CORE_RELEASES: dict[tuple[int, int], tuple[int, int]] = {
    (0, 4): (2023, 12),
    (0, 5): (2024, 2),
    (0, 6): (2024, 4),
    (0, 7): (2024, 5),
    (0, 8): (2024, 8),
    (0, 9): (2024, 10),
    (0, 10): (2025, 2),
    (0, 11): (2025, 3),
    (0, 12): (2025, 5),
    (0, 13): (2025, 7),
    (0, 14): (2025, 10),
    (0, 15): (2025, 12),
    (0, 16): (2026, 2),
    (0, 17): (2026, 4),
    (0, 18): (2026, 6),
    (0, 19): (2026, 8),
}
"""Megatron-Core (major, minor) -> (year, month) of its X.Y.0 tag in NVIDIA/Megatron-LM:
``core_v0.4.0`` 2023-12-11 to ``core_v0.7.0`` 2024-05-30, ``core_r0.8.0`` 2024-08-12,
``core_r0.9.0`` 2024-10-24, ``core_r0.10.0`` 2025-02-17, ``core_v0.11.0`` 2025-03-14,
``core_v0.12.0`` 2025-05-06, ``core_v0.13.0`` 2025-07-25, ``core_v0.14.0`` 2025-10-08,
``core_v0.15.0`` 2025-12-05, ``core_v0.16.0`` 2026-02-26, ``core_v0.17.0`` 2026-04-14,
``core_v0.18.0`` 2026-06-22, ``core_v0.19.0`` 2026-08-19. Releases before 0.4 have no tag
in the repository."""

MEGATRON_LM_RELEASES: dict[tuple[int, int], tuple[int, int]] = {
    (1, 0): (2020, 4),
    (2, 0): (2021, 1),
    (2, 5): (2021, 8),
    (2, 6): (2021, 8),
}
"""Megatron-LM (major, minor) -> (year, month) of its tag before Megatron-Core: ``v1.0``
2020-04-21, ``v2.0`` 2021-01-12, ``v2.5`` 2021-08-10, ``v2.6`` 2021-08-27."""

TRANSFORMER_ENGINE_RELEASES: dict[tuple[int, int], tuple[int, int]] = {
    (0, 1): (2022, 9),
    (0, 2): (2022, 10),
    (0, 3): (2022, 11),
    (0, 4): (2022, 12),
    (0, 5): (2023, 1),
    (0, 6): (2023, 3),
    (0, 7): (2023, 4),
    (0, 8): (2023, 4),
    (0, 9): (2023, 5),
    (0, 10): (2023, 6),
    (0, 11): (2023, 7),
    (0, 12): (2023, 8),
    (0, 13): (2023, 10),
    (1, 0): (2023, 10),
    (1, 1): (2023, 11),
    (1, 2): (2023, 12),
    (1, 3): (2024, 2),
    (1, 4): (2024, 3),
    (1, 5): (2024, 4),
    (1, 6): (2024, 5),
    (1, 7): (2024, 5),
    (1, 8): (2024, 7),
    (1, 9): (2024, 8),
    (1, 10): (2024, 9),
    (1, 11): (2024, 10),
    (1, 12): (2024, 11),
    (1, 13): (2024, 12),
    (2, 0): (2025, 2),
    (2, 1): (2025, 3),
    (2, 2): (2025, 4),
    (2, 3): (2025, 4),
    (2, 4): (2025, 6),
    (2, 5): (2025, 6),
    (2, 6): (2025, 7),
    (2, 7): (2025, 8),
    (2, 8): (2025, 10),
    (2, 9): (2025, 10),
    (2, 10): (2025, 11),
    (2, 11): (2025, 12),
    (2, 12): (2026, 1),
    (2, 13): (2026, 2),
    (2, 14): (2026, 4),
    (2, 15): (2026, 5),
    (2, 16): (2026, 5),
    (2, 17): (2026, 7),
    (2, 18): (2026, 8),
}
"""Transformer Engine (major, minor) -> (year, month) of its ``vX.Y`` tag in
NVIDIA/TransformerEngine, ``v0.1`` (2022-09-28) to ``v2.18`` (2026-08-14); ``v1.11``, the
first with FlashAttention-3, is of 2024-10-08."""
