"""A Spark (Delta) schema as an Iceberg schema: field ids, types and a name mapping.

Ids come from Delta column mapping when the table has it (`delta.columnMapping.id`, and
`delta.columnMapping.nested.ids` for list elements and map keys and values), so Iceberg readers
match columns in the data files by the ids Delta wrote. Otherwise each field keeps the id it had in
the previous Iceberg schema (by its path of names) and new fields get ids above every id used
before: a column keeps its id across conversions. The name mapping names each field as it is
written in the data files (its physical name), for files without field ids.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import types as T

from deltaspark.errors import UnsupportedFeatureError

TYPE_CHANGES_KEY = "delta.typeChanges"
ID_KEY = "delta.columnMapping.id"
PHYSICAL_KEY = "delta.columnMapping.physicalName"
NESTED_IDS_KEY = "delta.columnMapping.nested.ids"

_PRIMITIVES = {
    T.BooleanType: "boolean",
    T.ByteType: "int",
    T.ShortType: "int",
    T.IntegerType: "int",
    T.LongType: "long",
    T.FloatType: "float",
    T.DoubleType: "double",
    T.StringType: "string",
    T.BinaryType: "binary",
    T.DateType: "date",
    T.TimestampType: "timestamptz",
}


def primitive_type(data_type: T.DataType, format_version: int, where: str) -> str:
    """The Iceberg type of a Spark primitive, or UnsupportedFeatureError naming the column."""
    if isinstance(data_type, T.DecimalType):
        return f"decimal({data_type.precision}, {data_type.scale})"
    if type(data_type).__name__ == "TimestampNTZType":
        return "timestamp"
    if type(data_type).__name__ == "VariantType":
        if format_version < 3:
            raise UnsupportedFeatureError(
                f"Column {where} is a variant, which Iceberg has from format version 3: use formatVersion=3",
                ["variant"],
            )
        return "variant"
    for spark_type, name in _PRIMITIVES.items():
        if isinstance(data_type, spark_type):
            return name
    raise UnsupportedFeatureError(
        f"Column {where} has type {data_type.simpleString()}, which Iceberg cannot express",
        [data_type.simpleString()],
    )


_INTS = ("byte", "short", "integer")


def _promotable(before: str, after: str, format_version: int) -> bool:
    """Whether Iceberg reads data files of Delta type `before` as `after` (its type promotions)."""
    if before in _INTS and after in (*_INTS, "long"):
        return True  # byte and short are Iceberg ints already
    if (before, after) == ("float", "double"):
        return True
    if before.startswith("decimal") and after.startswith("decimal"):
        (p1, s1), (p2, s2) = (tuple(int(x) for x in t[8:-1].split(",")) for t in (before, after))
        return s1 == s2 and p2 >= p1
    return format_version >= 3 and (before, after) == ("date", "timestamp_ntz")


def check_type_changes(f: T.StructField, where: str, format_version: int) -> None:
    """Refuse a column Delta widened in a way Iceberg cannot read its older files as."""
    for change in f.metadata.get(TYPE_CHANGES_KEY, []) or []:
        before, after = str(change.get("fromType")), str(change.get("toType"))
        if not _promotable(before.replace(" ", ""), after.replace(" ", ""), format_version):
            path = ".".join([where, change["fieldPath"]]) if change.get("fieldPath") else where
            raise UnsupportedFeatureError(
                f"Column {path} was widened from {before} to {after}; Iceberg cannot read the files "
                "written before as the new type",
                ["typeWidening"],
            )


@dataclass
class _Ids:
    previous: dict[tuple[str, ...], int]
    next_id: int
    used: set[int] = field(default_factory=set)

    def take(self, path: tuple[str, ...], mapped: int | None) -> int:
        chosen = mapped if mapped is not None else self.previous.get(path)
        if chosen is None or chosen in self.used:
            chosen = self.next_id
            self.next_id += 1
        self.used.add(chosen)
        return chosen


@dataclass
class IcebergSchema:
    """The converted schema (`schema` is Iceberg's JSON form, without `schema-id`)."""

    schema: dict[str, Any]
    last_column_id: int
    name_mapping: list[dict[str, Any]]
    ids_by_path: dict[tuple[str, ...], int]  # top-level and struct fields, by logical names
    types_by_id: dict[int, Any]


def iceberg_schema(
    schema: T.StructType,
    format_version: int,
    previous: dict[tuple[str, ...], int] | None = None,
    last_column_id: int = 0,
) -> IcebergSchema:
    """`schema` with ids (see the module docstring); `previous` maps name paths (list elements as
    `element`, map parts as `key`/`value`) to the ids of the last conversion."""
    mapped = [v for v in _column_mapping_ids(schema)]
    ids = _Ids(previous or {}, max([last_column_id, *mapped, *(previous or {}).values()]) + 1)
    by_path: dict[tuple[str, ...], int] = {}
    types: dict[int, Any] = {}

    def convert(data_type: T.DataType, path: tuple[str, ...], physical: tuple[str, ...], nested: dict) -> Any:
        where = ".".join(path)
        if isinstance(data_type, T.StructType):
            fields, mapping = [], []
            for f in data_type.fields:
                name_path, phys_name = path + (f.name,), f.metadata.get(PHYSICAL_KEY, f.name)
                check_type_changes(f, ".".join(name_path), format_version)
                fid = ids.take(name_path, f.metadata.get(ID_KEY))
                # nested ids are keyed by physical paths from the field that holds them
                own = dict(f.metadata.get(NESTED_IDS_KEY, {}))
                phys = (phys_name,) if own else physical + (phys_name,)
                ftype, inner_mapping = convert(f.dataType, name_path, phys, own or nested)
                by_path[name_path] = fid
                types[fid] = ftype
                fields.append({"id": fid, "name": f.name, "required": not f.nullable, "type": ftype})
                entry = {"field-id": fid, "names": [phys_name]}
                if inner_mapping:
                    entry["fields"] = inner_mapping
                mapping.append(entry)
            return {"type": "struct", "fields": fields}, mapping
        if isinstance(data_type, T.ArrayType):
            eid = ids.take(path + ("element",), nested.get(".".join(physical) + ".element"))
            etype, inner = convert(
                data_type.elementType, path + ("element",), physical + ("element",), nested
            )
            types[eid] = etype
            out = {
                "type": "list",
                "element-id": eid,
                "element": etype,
                "element-required": not data_type.containsNull,
            }
            return out, [{"field-id": eid, "names": ["element"], **({"fields": inner} if inner else {})}]
        if isinstance(data_type, T.MapType):
            kid = ids.take(path + ("key",), nested.get(".".join(physical) + ".key"))
            vid = ids.take(path + ("value",), nested.get(".".join(physical) + ".value"))
            ktype, kinner = convert(data_type.keyType, path + ("key",), physical + ("key",), nested)
            vtype, vinner = convert(data_type.valueType, path + ("value",), physical + ("value",), nested)
            types[kid], types[vid] = ktype, vtype
            out = {
                "type": "map", "key-id": kid, "key": ktype, "value-id": vid, "value": vtype,
                "value-required": not data_type.valueContainsNull,
            }  # fmt: skip
            return out, [
                {"field-id": kid, "names": ["key"], **({"fields": kinner} if kinner else {})},
                {"field-id": vid, "names": ["value"], **({"fields": vinner} if vinner else {})},
            ]
        return primitive_type(data_type, format_version, where), []

    converted, mapping = convert(schema, (), (), {})
    return IcebergSchema(
        schema=converted,
        last_column_id=max([last_column_id, *ids.used]) if ids.used else last_column_id,
        name_mapping=mapping,
        ids_by_path=by_path,
        types_by_id=types,
    )


def _column_mapping_ids(data_type: T.DataType) -> list[int]:
    out: list[int] = []
    if isinstance(data_type, T.StructType):
        for f in data_type.fields:
            if ID_KEY in f.metadata:
                out.append(int(f.metadata[ID_KEY]))
            out += [int(v) for v in dict(f.metadata.get(NESTED_IDS_KEY, {})).values()]
            out += _column_mapping_ids(f.dataType)
    elif isinstance(data_type, T.ArrayType):
        out += _column_mapping_ids(data_type.elementType)
    elif isinstance(data_type, T.MapType):
        out += _column_mapping_ids(data_type.keyType) + _column_mapping_ids(data_type.valueType)
    return out


def ids_by_path(schema: dict[str, Any]) -> dict[tuple[str, ...], int]:
    """Name path -> id of every field of an Iceberg schema (lists as `element`, maps `key`/`value`):
    the `previous` of the next conversion."""
    out: dict[tuple[str, ...], int] = {}

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if not isinstance(node, dict):
            return
        kind = node.get("type")
        if kind == "struct":
            for f in node["fields"]:
                out[path + (f["name"],)] = int(f["id"])
                walk(f["type"], path + (f["name"],))
        elif kind == "list":
            out[path + ("element",)] = int(node["element-id"])
            walk(node["element"], path + ("element",))
        elif kind == "map":
            out[path + ("key",)] = int(node["key-id"])
            out[path + ("value",)] = int(node["value-id"])
            walk(node["key"], path + ("key",))
            walk(node["value"], path + ("value",))

    walk(schema, ())
    return out
