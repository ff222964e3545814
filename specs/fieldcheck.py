"""Field-local checks used by the specs' ``__post_init__`` methods.

Each raises `SpecError` naming the class, the field and the value. Cross-object rules
(divisibility of heads by tp and so on) are not here: they are the named rules of
`specs.rules`.
"""

from __future__ import annotations

from typing import Any, get_args

from specs.errors import SpecError


def require_positive(obj: Any, *names: str) -> None:
    """Each named int field must be >= 1."""
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(
                f"{type(obj).__name__}.{name} must be a positive integer, got {value!r}"
            )


def require_non_negative(obj: Any, *names: str) -> None:
    """Each named int field must be >= 0."""
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SpecError(
                f"{type(obj).__name__}.{name} must be a non-negative integer, got {value!r}"
            )


def require_optional_positive(obj: Any, *names: str) -> None:
    """Each named field must be None or an int >= 1."""
    for name in names:
        if getattr(obj, name) is not None:
            require_positive(obj, name)


def require_choice(obj: Any, name: str, literal: Any) -> None:
    """The named field must be one of the values of a `Literal` type."""
    value = getattr(obj, name)
    allowed = get_args(literal)
    if value not in allowed:
        choices = ", ".join(repr(a) for a in allowed)
        raise SpecError(f"{type(obj).__name__}.{name} must be one of {choices}, got {value!r}")


def require_choices(obj: Any, name: str, literal: Any) -> None:
    """The named field must be None or a tuple of distinct values of a `Literal` type."""
    value = getattr(obj, name)
    if value is None:
        return
    allowed = get_args(literal)
    if not isinstance(value, tuple):
        raise SpecError(f"{type(obj).__name__}.{name} must be a tuple, got {value!r}")
    bad = [v for v in value if v not in allowed]
    if bad or len(set(value)) != len(value):
        choices = ", ".join(repr(a) for a in allowed)
        problem = f"unknown {bad[0]!r}" if bad else "a repeated entry"
        raise SpecError(
            f"{type(obj).__name__}.{name} has {problem} in {value!r}: use distinct values of "
            f"{choices}"
        )
