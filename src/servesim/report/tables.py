"""Per-request records as data frames and Parquet files (optional extras, imported when used).

Records keep their nested histories (`admission_history`, `routing_history`) as lists of
structs. A key that only some records have (`rejection_reason`) becomes a column that is null
elsewhere: no record loses a field.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _require(module: str, extra: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"{module} is not installed: pip install 'servesim[{extra}]'") from None


def columns(rows: Sequence[dict[str, Any]]) -> dict[str, list[Any]]:
    """The records as columns: every key any record has, in first-seen order, None where absent."""
    names = list(dict.fromkeys(key for row in rows for key in row))
    return {name: [row.get(name) for row in rows] for name in names}


def to_arrow(rows: Sequence[dict[str, Any]]) -> Any:
    """The records as a pyarrow Table."""
    pa = _require("pyarrow", "parquet")
    return pa.table(columns(rows))


def write_parquet(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """Write the records to a Parquet file (zstd-compressed)."""
    pq = _require("pyarrow.parquet", "parquet")
    pq.write_table(to_arrow(rows), path, compression="zstd")


def read_parquet(path: Path) -> list[dict[str, Any]]:
    """Read records written by `write_parquet` back as dicts."""
    pq = _require("pyarrow.parquet", "parquet")
    return pq.read_table(path).to_pylist()


def to_pandas(rows: Sequence[dict[str, Any]]) -> Any:
    """The records as a pandas DataFrame, one row per request."""
    pd = _require("pandas", "pandas")
    return pd.DataFrame(columns(rows))


def to_polars(rows: Sequence[dict[str, Any]]) -> Any:
    """The records as a polars DataFrame, one row per request, with the column types of the
    Parquet file (polars takes the pyarrow Table over)."""
    pl = _require("polars", "polars")
    return pl.from_arrow(to_arrow(rows))
