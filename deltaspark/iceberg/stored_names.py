"""The names Iceberg data files store their columns under, as physical names for a Delta table.

Iceberg resolves columns by field id, so a data file may hold a column under another name than the
table's: Iceberg's Parquet writer (Java, and pyiceberg's) sanitises names that are not valid Avro
names (`Breed Name` is stored as `Breed_x20Name`, `a.b` as `a_x2Eb`, `1st` as `_1st`), and a renamed
column keeps its old name in the files written before the rename. A Delta table converted in place
reads those files; readers that resolve columns by physical name (delta-rs) need the stored name.

- `with_stored_names` wraps the conversion's file describer: each described file also gets `names`,
  the field id -> name of every field with an id in its Parquet schema (JSON), read from its footer.
- `choose` picks one physical name per field id: the name the files that hold the field store it
  under, and where they disagree, the one holding the most rows (then files); a field no file
  holds keeps its Iceberg name. Siblings whose chosen names would collide keep their Iceberg names.
- `stats_renamer` rewrites the statistics JSON (keyed by Iceberg names) to the chosen names: Delta
  keys statistics by physical name under column mapping.

Runs inside `mapInArrow` (`with_stored_names`, `stats_renamer`) and on the driver (`choose`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from deltaspark.file_io import carry_settings, open_file
from deltaspark.iceberg.data_reader import IcebergReadError, stored_id

NAMES_FIELD = pa.field("names", pa.string())
Tree = dict[str, tuple[str, "Tree"]]  # Iceberg name -> (physical name, the same for its struct fields)


def names_in(arrow_type: Any) -> dict[int, str]:
    """Field id -> stored name of every field with an id, at any depth (struct fields, and the
    element, key and value fields of lists and maps)."""
    out: dict[int, str] = {}
    if isinstance(arrow_type, pa.Schema) or pa.types.is_struct(arrow_type):
        children = list(arrow_type)
    elif pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        children = [arrow_type.value_field]
    elif pa.types.is_map(arrow_type):
        children = [arrow_type.key_field, arrow_type.item_field]
    else:
        children = []
    for child in children:
        field_id = stored_id(child)
        if field_id is not None:
            out[field_id] = child.name
        out.update(names_in(child.type))
    return out


def _file_names(location: str) -> str:
    import pyarrow.parquet as pq

    try:
        filesystem, local = open_file(location)
        with filesystem.open_input_file(local) as handle:
            schema = pq.ParquetFile(handle).schema_arrow
    except Exception as exc:
        raise IcebergReadError(f"deltaspark: cannot read the Parquet footer of {location}: {exc}") from exc
    names = names_in(schema)
    return json.dumps({str(k): names[k] for k in sorted(names)}, separators=(",", ":"), ensure_ascii=False)


def with_stored_names(describe: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]):  # noqa: ANN201
    """`describe` (a mapInArrow function whose output has the data file's path in `key`) with a
    `names` column added: the JSON of `names_in` of each file's Parquet schema."""

    def run(batches):  # noqa: ANN001, ANN202
        for batch in batches:
            for out in describe(iter([batch])):
                names = pa.array([_file_names(k) for k in out.column("key").to_pylist()], pa.string())
                yield pa.RecordBatch.from_arrays([*out.columns, names], schema=out.schema.append(NAMES_FIELD))

    return carry_settings(run)


def choose(schema: dict[str, Any], stored: list[tuple[str, int, int]]) -> tuple[dict[int, str], list[str]]:
    """Physical names by field id for the struct fields of `schema` (Iceberg JSON), from `stored`:
    (`names` JSON, rows, files) per distinct `names`. Also what to warn about: fields the files
    store under several names, and sibling names that would collide."""
    votes: dict[int, dict[str, list[int]]] = {}
    for text, rows, count in stored:
        for key, name in json.loads(text or "{}").items():
            tally = votes.setdefault(int(key), {}).setdefault(name, [0, 0])
            tally[0] += rows or 0
            tally[1] += count or 0
    physical: dict[int, str] = {}
    notes: list[str] = []

    def walk(fields: list[dict[str, Any]], where: str) -> None:
        level: dict[int, str] = {}
        for f in fields:
            field_id, name = int(f["id"]), str(f["name"])
            options = votes.get(field_id, {})
            best = name
            if options:
                best = max(options, key=lambda n: (options[n][0], options[n][1], n == name, n))
            if len(options) > 1:
                held = ", ".join(f"`{n}` ({r} rows in {c} files)" for n, (r, c) in sorted(options.items()))
                notes.append(
                    f"column `{where}{name}` (field id {field_id}) is stored under several names: "
                    f"{held}; its Delta physical name is `{best}`, so readers that resolve columns by "
                    "name (delta-rs) read NULL for it in the other files (readers by field id read all)"
                )
            level[field_id] = best
        folded = [n.lower() for n in level.values()]
        if len(set(folded)) != len(folded):
            notes.append(
                f"the names stored for the fields of `{where or '<table>'}` would collide "
                f"({sorted(level.values())}): they keep their Iceberg names"
            )
            level = {int(f["id"]): str(f["name"]) for f in fields}
        physical.update(level)
        for f in fields:
            for struct in _structs(f["type"]):
                walk(struct["fields"], f"{where}{f['name']}.")

    walk(schema["fields"], "")
    return physical, notes


def _structs(iceberg_type: Any) -> list[dict[str, Any]]:
    """The struct types directly under a type (itself, or a list's element, a map's key and value)."""
    if not isinstance(iceberg_type, dict):
        return []
    kind = iceberg_type.get("type")
    if kind == "struct":
        return [iceberg_type]
    if kind == "list":
        return _structs(iceberg_type["element"])
    if kind == "map":
        return _structs(iceberg_type["key"]) + _structs(iceberg_type["value"])
    return []


def rename_tree(schema: dict[str, Any], physical: dict[int, str]) -> Tree:
    """Iceberg name -> (physical name, subtree) through structs, where a name on the path differs
    (statistics cover struct fields only); empty when every physical name is the Iceberg name."""

    def walk(fields: list[dict[str, Any]]) -> Tree:
        out: Tree = {}
        for f in fields:
            new = physical.get(int(f["id"]), f["name"])
            inner = f["type"]
            sub = walk(inner["fields"]) if isinstance(inner, dict) and inner.get("type") == "struct" else {}
            if new != f["name"] or sub:
                out[f["name"]] = (new, sub)
        return out

    return walk(schema["fields"])


def _renamed(values: Any, tree: Tree) -> Any:
    if not isinstance(values, dict) or not tree:
        return values
    out = {}
    for key, value in values.items():
        new, sub = tree.get(key, (key, {}))
        out[new] = _renamed(value, sub)
    return out


def renamed_stats(text: str | None, tree: Tree) -> str | None:
    """Delta statistics JSON with the column keys of `minValues`, `maxValues`, `nullCount` renamed."""
    if not text or not tree:
        return text
    stats = json.loads(text)
    for key in ("minValues", "maxValues", "nullCount"):
        if key in stats:
            stats[key] = _renamed(stats[key], tree)
    return json.dumps(stats, separators=(",", ":"))  # as the describer writes it


def stats_renamer(tree: Tree):  # noqa: ANN201 - a mapInArrow function
    """Input: rows with a `stats` column; output: the same rows with `stats` renamed by `tree`."""

    def run(batches):  # noqa: ANN001, ANN202
        for batch in batches:
            index = batch.schema.get_field_index("stats")
            columns = list(batch.columns)
            columns[index] = pa.array(
                [renamed_stats(s, tree) for s in columns[index].to_pylist()], pa.string()
            )
            yield pa.RecordBatch.from_arrays(columns, schema=batch.schema)

    return run
