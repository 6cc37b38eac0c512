"""The batch function inside Hugging Face ``datasets.map`` and Ray Data ``map_batches``.

Neither library is imported here: the adapters are plain picklable callables that
take a batch of columns and return the same columns the built-in runner writes.
A batch whose only column is ``text`` holds raw JSON lines (read the input with
``load_dataset("text", ...)`` or ``ray.data.read_text``), which keeps the rows
exactly as in the file; otherwise each row's columns are the row's keys (Arrow
fills absent keys with null, so store ``tools`` as a JSON string there).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._arrow import Profile, batch_table
from ._batch import render_batch
from ._inputs import InputOptions
from ._policy import TrainPolicy


def _rows(columns: Mapping[str, Sequence[Any]]) -> list[Any]:
    keys = [k for k in columns if k != "line"]
    if keys == ["text"]:
        return list(columns["text"])
    count = len(columns[keys[0]]) if keys else 0
    return [{k: columns[k][i] for k in keys if columns[k][i] is not None} for i in range(count)]


@dataclass(frozen=True)
class _Mapper:
    policy: TrainPolicy | str | None = None
    input_options: InputOptions | None = None
    profile: Profile = "canonical"

    def _table(self, columns: Mapping[str, Sequence[Any]], lines: Sequence[int] | None) -> Any:
        batch = render_batch(
            _rows(columns), policy=self.policy, options=self.input_options, line_numbers=lines
        )
        return batch_table(batch, self.profile)


@dataclass(frozen=True)
class HFMapper(_Mapper):
    """For ``Dataset.map(HFMapper(...), batched=True, with_indices=True,
    remove_columns=dataset.column_names)``; row ``i`` is reported as line ``i + 1``."""

    def __call__(
        self, columns: Mapping[str, Sequence[Any]], indices: Sequence[int] | None = None
    ) -> dict[str, list[Any]]:
        lines = None if indices is None else [i + 1 for i in indices]
        return self._table(columns, lines).to_pydict()  # type: ignore[no-any-return]


@dataclass(frozen=True)
class RayMapper(_Mapper):
    """For ``ds.map_batches(RayMapper, fn_constructor_kwargs={...},
    batch_format="pyarrow", concurrency=N)``: Arrow in, Arrow out. A ``line``
    column, when present, numbers the rows."""

    def __call__(self, table: Any) -> Any:
        columns = table.to_pydict()
        return self._table(columns, columns.get("line"))
