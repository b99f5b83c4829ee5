"""A directory listing through Hadoop's FileSystem in one round trip into the JVM.

`HadoopStorage.list_dir` reads a listing's statuses as their text (Hadoop's `FileStatus.toString`,
joined by Scala's array wrapper in the JVM): seven round trips per file become one per listing.
Whatever does not read exactly as Hadoop writes it goes file by file, as before.
"""

from __future__ import annotations

import pytest

from deltaspark.storage import _parse_statuses, storage_for

NAMES = [
    "00000000000000000000.json",
    "a b.json",
    "per%cent.json",
    "ünï.json",
    ".hidden.tmp",
    "_last_checkpoint",
]


def _sorted(files):
    return sorted(files, key=lambda f: f.path)


def _file_by_file(storage, path: str, name_glob: str | None = None):
    text = storage._statuses_text
    storage._statuses_text = lambda statuses: None
    try:
        return storage.list_dir(path, name_glob)
    finally:
        storage._statuses_text = text


def test_a_listing_in_one_round_trip_equals_the_listing_file_by_file(spark, tmp_path):
    folder = tmp_path / "_delta_log"
    folder.mkdir()
    for size, name in enumerate(NAMES):
        (folder / name).write_bytes(b"x" * size)
    (folder / "_sidecars").mkdir()  # a directory: left out of both
    storage = storage_for(spark)
    fs, jpath = storage._fs_and_path(str(folder))
    text = storage._statuses_text(fs.listStatus(jpath))
    assert text is not None and text.count("\0") == len(NAMES)  # one text for the whole listing
    fast = _parse_statuses(text, str(jpath.toUri().getPath()))
    slow = _file_by_file(storage, str(folder))
    assert fast is not None and _sorted(fast) == _sorted(slow)
    assert _sorted(storage.list_dir(str(folder))) == _sorted(slow)
    assert {f.name: f.size for f in slow} == {name: size for size, name in enumerate(NAMES)}
    globbed = storage.list_dir(str(folder), "*.json")
    assert _sorted(globbed) == _sorted(_file_by_file(storage, str(folder), "*.json")) and len(globbed) == 4
    assert storage.list_dir(str(tmp_path / "missing")) is None


@pytest.mark.one_suite("4.x")
def test_a_status_text_that_does_not_read_as_hadoops_goes_file_by_file():
    hadoop = (
        "FileStatus{path=file:/t/_delta_log/00.json; isDirectory=false; length=12; replication=1; "
        "blocksize=33554432; modification_time=1700000000000; access_time=0; owner=; group=; "
        "permission=rw-r--r--; isSymlink=false; hasAcl=false; isEncrypted=false; isErasureCoded=false}"
    )
    s3a = (  # S3AFileStatus appends its own fields after Hadoop's
        "S3AFileStatus{path=s3a://b/t/_delta_log/01.json; isDirectory=false; length=5; replication=1; "
        "blocksize=33554432; modification_time=1700000000001; access_time=0; owner=u; group=u; "
        "permission=rw-rw-rw-; isSymlink=false; hasAcl=false; isEncrypted=true; isErasureCoded=false} "
        "isEmptyDirectory=FALSE eTag=abc versionId=null"
    )
    directory = (
        "FileStatus{path=file:/t/_delta_log/_sidecars; isDirectory=true; modification_time=1; access_time=0}"
    )
    parsed = _parse_statuses("\0".join([hadoop, directory]), "/t/_delta_log")
    assert [(f.path, f.name, f.size, f.modification_time) for f in parsed] == [
        ("file:/t/_delta_log/00.json", "00.json", 12, 1700000000000)
    ]
    assert [(f.name, f.size) for f in _parse_statuses(s3a, "/t/_delta_log")] == [("01.json", 5)]
    assert _parse_statuses("", "/t/_delta_log") == []
    assert _parse_statuses("SomeStore[00.json, 12 bytes]", "/t/_delta_log") is None  # another format
    assert _parse_statuses(hadoop, "/elsewhere") is None  # not a child of the listed directory
    assert _parse_statuses(hadoop.replace("length=12; ", ""), "/t/_delta_log") is None  # no size


def test_a_filesystem_is_resolved_once_per_scheme_and_authority(spark, tmp_path):
    """`_fs_and_path` keeps one FileSystem per (scheme, authority): paths of one store share it,
    another authority gets its own, and a local disk's is the raw one (no client-side .crc)."""
    storage = storage_for(spark)
    local, _ = storage._fs_and_path(f"file:{tmp_path}/a.json")
    again, _ = storage._fs_and_path(f"file://{tmp_path}/b/c.json")
    assert local is again
    assert "RawLocalFileSystem" in str(local.getClass().getName())
    one, _ = storage._fs_and_path("hdfs://127.0.0.1:8020/t/_delta_log/0.json")
    other, _ = storage._fs_and_path("hdfs://127.0.0.1:9000/t/_delta_log/0.json")
    same, _ = storage._fs_and_path("HDFS://127.0.0.1:8020/u")
    assert str(one.getUri()) == "hdfs://127.0.0.1:8020" and str(other.getUri()) == "hdfs://127.0.0.1:9000"
    assert same is one


def test_local_log_files_are_read_by_python_as_the_jvm_reads_them(spark, tmp_path):
    """`read_text` / `read_bytes` of a local file: the same text (bytes that are not UTF-8 replaced
    alike), and None for a missing file."""
    storage = storage_for(spark)
    path = tmp_path / "00000000000000000000.json"
    path.write_bytes('{"add":{"path":"ü"}}\n'.encode() + b"\xff\xfe tail\n")
    uri = f"file:{path}"
    via_jvm = str(
        storage._io_utils.toString(storage._fs_and_path(uri)[0].open(storage._path_class(uri)), "UTF-8")
    )
    assert storage.read_text(uri) == via_jvm and "\ufffd" in via_jvm
    assert storage.read_bytes(uri) == path.read_bytes()
    assert storage.read_text(f"file:{tmp_path}/missing.json") is None
    assert storage.read_bytes(f"file:{tmp_path}/missing.json") is None
