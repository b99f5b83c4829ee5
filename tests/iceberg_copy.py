"""A relocated copy of an Iceberg conformance table: every stored path (metadata JSON, manifest
lists, manifests, position-delete files) rewritten to point at the copy, so readers without a
relocation option (pyiceberg) can read it, and deltaspark can be checked on a table that needs none."""

from __future__ import annotations

import gzip
import io
import shutil
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq


def _rewrite(text: str, prefixes: list[str], target: str) -> str:
    tokens = {}
    for index, prefix in enumerate(sorted(prefixes, key=len, reverse=True)):
        token = f"\x00{index}\x00"
        tokens[token] = target.rstrip("/") + ("/" if prefix.endswith("/") else "")
        text = text.replace(prefix, token)
    for token, value in tokens.items():
        text = text.replace(token, value)
    return text


def _rewrite_avro(path: Path, prefixes: list[str], target: str) -> None:
    with open(path, "rb") as handle:
        reader = fastavro.reader(handle)
        schema = reader.writer_schema
        meta = {k: v for k, v in reader.metadata.items() if not k.startswith("avro.")}
        codec = reader.metadata.get("avro.codec", "null")
        records = list(reader)

    def fix(record: dict) -> None:
        for key in ("manifest_path", "file_path", "referenced_data_file"):
            if isinstance(record.get(key), str):
                record[key] = _rewrite(record[key], prefixes, target)
        for key in ("lower_bounds", "upper_bounds"):  # position deletes' file_path bounds: old paths
            if isinstance(record.get(key), list):
                record[key] = [kv for kv in record[key] if kv["key"] != 2147483546]
        if isinstance(record.get("data_file"), dict):
            fix(record["data_file"])

    for record in records:
        fix(record)
    out = io.BytesIO()
    fastavro.writer(out, fastavro.parse_schema(schema), records, codec=codec, metadata=meta)
    path.write_bytes(out.getvalue())


def relocated_copy(source: Path, prefixes: list[str], destination: Path) -> Path:
    shutil.copytree(source, destination)
    target = str(destination)
    for path in sorted(destination.rglob("*")):
        if not path.is_file() or path.name.endswith(".crc"):
            continue
        if ".metadata.json" in path.name:
            data = path.read_bytes()
            zipped = data[:2] == b"\x1f\x8b"
            text = _rewrite((gzip.decompress(data) if zipped else data).decode(), prefixes, target)
            path.write_bytes(gzip.compress(text.encode()) if zipped else text.encode())
        elif path.suffix == ".avro":
            _rewrite_avro(path, prefixes, target)
        elif path.suffix in (".parquet", ".parq") and {"file_path", "pos"} <= set(pq.read_schema(path).names):
            table = pq.read_table(path)
            if True:
                index = table.column_names.index("file_path")
                values = [
                    None if v is None else _rewrite(v, prefixes, target)
                    for v in table.column("file_path").to_pylist()
                ]
                field = table.schema.field(index)
                table = table.set_column(index, field, pa.array(values, field.type))
                pq.write_table(table, path)
    return destination
