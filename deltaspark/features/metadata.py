"""The `metaData` action: table id, schema, partition columns and configuration."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.types import StructType

from deltaspark.features.schema import parse_schema_string


def is_true(value: str | None) -> bool:
    """A boolean table property (or session setting) as Delta reads one: "true", any case."""
    return (value or "").strip().lower() == "true"


@dataclass(frozen=True)
class Metadata:
    id: str | None
    name: str | None
    description: str | None
    formatProvider: str
    formatOptions: dict[str, str]
    schemaString: str
    partitionColumns: tuple[str, ...]
    createdTime: int | None
    configuration: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_row(cls, row: Any) -> Metadata:
        d = row.asDict(recursive=True) if hasattr(row, "asDict") else dict(row)
        fmt = d.get("format") or {}
        return cls(
            id=d.get("id"),
            name=d.get("name"),
            description=d.get("description"),
            formatProvider=fmt.get("provider") or "parquet",
            formatOptions=dict(fmt.get("options") or {}),
            schemaString=d.get("schemaString") or "",
            partitionColumns=tuple(d.get("partitionColumns") or ()),
            createdTime=d.get("createdTime"),
            configuration={k: v for k, v in (d.get("configuration") or {}).items() if v is not None},
        )

    def flag(self, key: str) -> bool:
        """Whether the boolean table property `key` is set to true."""
        return is_true(self.configuration.get(key))

    def schema(self, where: str = "the table") -> StructType:
        return parse_schema_string(self.schemaString, where)

    def asDict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "description": self.description,
            "format": {"provider": self.formatProvider, "options": dict(self.formatOptions)},
            "schemaString": self.schemaString,
            "partitionColumns": list(self.partitionColumns),
            "createdTime": self.createdTime,
            "configuration": dict(self.configuration),
        }
