"""The execution options of a priced plan as `plan.json` records them
(`specs.bundle.PlanBundle.execution`).

A record holds only the `ExecutionOptions` fields that differ from `DEFAULT_OPTIONS`
(Megatron-LM's current defaults), by field name, in the JSON form of `specs.serde` (a
frozenset is a sorted list). Only the differences, because:
- they are exactly what an export must state beyond the plan (`planner.export_options`):
  a field at its default needs no argument, so an old plan file without the key exports as
  it always did;
- a file stays readable by a later paraplan whose `ExecutionOptions` gained a field (the
  new field takes its default, as the plan was priced before it existed);
- the file states what the user chose, not the cost model's fitted constants, which are
  refitted between releases (a recorded default would pin a stale value).

`record_options` writes a record, `options_from_record` reads one back (unknown fields and
bad values are a `SpecError` naming the key, the value and the fix).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from specs.errors import SpecError, did_you_mean
from specs.serde import from_dict, to_dict

RECORD_KEY = "execution"
"""Key of the record in `plan.json` (`specs.bundle.PlanBundle.execution`)."""


def record_options(options: ExecutionOptions) -> dict[str, Any]:
    """The fields of ``options`` that differ from `DEFAULT_OPTIONS`, as JSON values, in
    field order; empty for the defaults."""
    data = to_dict(options)
    default = to_dict(DEFAULT_OPTIONS)
    return {name: value for name, value in data.items() if value != default[name]}


def options_from_record(record: dict[str, Any], *, where: str = RECORD_KEY) -> ExecutionOptions:
    """The `ExecutionOptions` of a record: `DEFAULT_OPTIONS` with the recorded fields.

    Raises `SpecError` for a key that is no `ExecutionOptions` field (naming it, the valid
    fields and the fix) and for a value of the wrong type or range (the field's own check).
    """
    fields = [f.name for f in dataclasses.fields(ExecutionOptions)]
    unknown = [key for key in record if key not in fields]
    if unknown:
        key = unknown[0]
        raise SpecError(
            f"{where}: {key!r} is no execution option{did_you_mean(key, fields)} (the keys of "
            f"{RECORD_KEY!r} are ExecutionOptions fields: {', '.join(fields)}); remove it, or "
            "write the plan file again with this paraplan (`paraplan plan --out`)"
        )
    return from_dict(ExecutionOptions, record, where=where)
