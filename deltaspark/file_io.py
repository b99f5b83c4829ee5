"""How deltaspark's Python code opens files: `pyarrow.fs`, set up from the session's Hadoop settings.

Spark's own reads go through Hadoop's FileSystem (`storage`), which the cluster configures. The
Python side - executor tasks that read data files, deletion vectors, Iceberg manifests and footers,
that list and delete a table's files, and the driver's reads of Iceberg metadata - opens files with
`pyarrow.fs`, which knows nothing of Hadoop. The settings that say where and as whom to reach an
object store are therefore read from the session's Hadoop configuration on the driver
(`session_settings`) and travel with each job's tasks (`carry_settings`): an executor is another
process, often on another host, and sees neither the driver's configuration nor its environment.

Translated: S3A's `fs.s3a.*` (endpoint, region, access and secret key, session token, path-style
access, SSL, the anonymous provider, and per-bucket `fs.s3a.bucket.<bucket>.*` overrides) for
`s3a://`, `s3n://` and `s3://`. Everything else opens with pyarrow's defaults: the executors' own
credentials (instance profile, environment, GCS application-default credentials).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

# S3A options read from the Hadoop configuration (each also as `fs.s3a.bucket.<bucket>.<option>`).
S3A_OPTIONS = (
    "endpoint",
    "endpoint.region",
    "access.key",
    "secret.key",
    "session.token",
    "path.style.access",
    "connection.ssl.enabled",
    "aws.credentials.provider",
)
_SECRETS = frozenset({"access.key", "secret.key", "session.token"})  # may come from a credential provider
S3_SCHEMES = ("s3a://", "s3n://", "s3://")

Pairs = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class FileSystemSettings:
    """The S3A settings that apply to every bucket, and those set for one bucket. Small, hashable
    and picklable: it is captured by the functions Spark ships to the executors."""

    s3a: Pairs = ()
    s3a_buckets: tuple[tuple[str, Pairs], ...] = ()

    def __repr__(self) -> str:  # never print a secret (it may end up in a log or an error)
        return f"FileSystemSettings(s3a={sorted(dict(self.s3a))}, buckets={[b for b, _ in self.s3a_buckets]})"

    def s3a_for(self, bucket: str) -> dict[str, str]:
        """S3A options for `bucket`: the bucket's own override the general ones, as in S3A."""
        options = dict(self.s3a)
        options.update(dict(dict(self.s3a_buckets).get(bucket, ())))
        return options


def s3_options(s3a: dict[str, str]) -> dict[str, Any]:
    """`pyarrow.fs.S3FileSystem` arguments equivalent to S3A options."""
    options: dict[str, Any] = {}
    if s3a.get("access.key") and s3a.get("secret.key"):
        options["access_key"], options["secret_key"] = s3a["access.key"], s3a["secret.key"]
        if s3a.get("session.token"):
            options["session_token"] = s3a["session.token"]
    if "Anonymous" in s3a.get("aws.credentials.provider", ""):
        options["anonymous"] = True
    if s3a.get("endpoint.region"):
        options["region"] = s3a["endpoint.region"]
    endpoint = s3a.get("endpoint", "").strip().rstrip("/")
    ssl = s3a.get("connection.ssl.enabled", "true").strip().lower() != "false"
    if "://" in endpoint:
        scheme, endpoint = endpoint.split("://", 1)
        ssl = scheme.lower() == "https"
    if endpoint and not _is_aws(endpoint):
        options["endpoint_override"] = endpoint
        # S3A addresses buckets as virtual hosts unless path-style access is on; so does pyarrow.
        options["force_virtual_addressing"] = s3a.get("path.style.access", "false").strip().lower() != "true"
    elif endpoint and "region" not in options:
        region = _aws_region(endpoint)
        if region:
            options["region"] = region
    if not ssl:
        options["scheme"] = "http"
    return options


def _is_aws(endpoint: str) -> bool:
    host = endpoint.split("/", 1)[0].split(":", 1)[0].lower()
    return host.endswith(".amazonaws.com") or host.endswith(".amazonaws.com.cn")


def _aws_region(endpoint: str) -> str | None:
    """`eu-west-1` of `s3.eu-west-1.amazonaws.com` or `s3-eu-west-1.amazonaws.com`; None for the
    global `s3.amazonaws.com`."""
    first = endpoint.split(".amazonaws.com", 1)[0]
    parts = first.replace("s3-", "s3.", 1).split(".")
    candidates = [p for p in parts if p not in ("s3", "dualstack", "s3-fips", "fips")]
    return candidates[-1] if candidates else None


# -- on the driver: the session's settings -----------------------------------------------------


def session_settings(spark: Any = None) -> FileSystemSettings:
    """The settings of `spark` (default: the active session); empty where there is no session (an
    executor)."""
    if spark is None:
        spark = _active_session()
        if spark is None:
            return FileSystemSettings()
    from deltaspark.spark_compat import is_connect

    if is_connect(spark):
        return _from_runtime_conf(spark)
    return _from_hadoop_conf(spark)


def _active_session() -> Any:
    try:
        from pyspark.sql import SparkSession

        return SparkSession.getActiveSession()
    except Exception:  # an executor's Python worker: no session, no gateway
        return None


def _from_hadoop_conf(spark: Any) -> FileSystemSettings:
    """From the Hadoop configuration Spark's own reads use: the cluster's `core-site.xml`,
    `spark.hadoop.*` and the session's `fs.*` settings. Secrets go through `getPassword`, so that
    Hadoop credential providers (JCEKS files) work as they do for S3A."""
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    jvm = spark._jvm

    def value(key: str, option: str) -> str | None:
        if option in _SECRETS:
            chars = conf.getPassword(key)
            return None if chars is None else str(jvm.java.lang.String.valueOf(chars))
        found = conf.get(key)
        return None if found is None else str(found)

    general = tuple((o, v) for o in S3A_OPTIONS if (v := value(f"fs.s3a.{o}", o)) is not None)
    props = conf.getPropsWithPrefix("fs.s3a.bucket.")
    buckets: dict[str, dict[str, str]] = {}
    if props.size():
        for name in list(props.keySet()):
            bucket, _, option = str(name).partition(".")
            if option in S3A_OPTIONS:
                found = value(f"fs.s3a.bucket.{name}", option)
                if found is not None:
                    buckets.setdefault(bucket, {})[option] = found
    return FileSystemSettings(general, _bucket_pairs(buckets))


def _from_runtime_conf(spark: Any) -> FileSystemSettings:
    """Spark Connect: the session's configuration (`spark.hadoop.fs.s3a.*` set at launch or in the
    session, and `fs.s3a.*` set in the session); a server's own `core-site.xml` is out of reach."""
    try:
        every = dict(spark.conf.getAll)  # one round trip (pyspark 4.x)
    except Exception:
        every = {}
        for option in S3A_OPTIONS:
            for key in (f"spark.hadoop.fs.s3a.{option}", f"fs.s3a.{option}"):
                found = spark.conf.get(key, None)
                if found is not None:
                    every[key] = found
    general: dict[str, str] = {}
    buckets: dict[str, dict[str, str]] = {}
    for key in sorted(every, key=lambda k: not k.startswith("spark.hadoop.")):  # session settings win
        name = key.removeprefix("spark.hadoop.")
        if not name.startswith("fs.s3a.") or every[key] is None:
            continue
        rest = name[len("fs.s3a.") :]
        if rest.startswith("bucket."):
            bucket, _, option = rest[len("bucket.") :].partition(".")
            if option in S3A_OPTIONS:
                buckets.setdefault(bucket, {})[option] = str(every[key])
        elif rest in S3A_OPTIONS:
            general[rest] = str(every[key])
    return FileSystemSettings(tuple(sorted(general.items())), _bucket_pairs(buckets))


def _bucket_pairs(buckets: dict[str, dict[str, str]]) -> tuple[tuple[str, Pairs], ...]:
    return tuple((b, tuple(sorted(o.items()))) for b, o in sorted(buckets.items()))


# -- in tasks: the settings the job carried -----------------------------------------------------

_installed: FileSystemSettings | None = None


def install(settings: FileSystemSettings | None) -> None:
    """Make `settings` the ones `open_file` uses in this process (a task's Python worker)."""
    global _installed
    _installed = settings


def carry_settings(
    body: Callable[[Iterator[Any]], Iterator[Any]],
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """`body` (a `mapInArrow` function), run with this session's settings installed: call it on
    the driver where the job is built. Called where there is no session (inside a task), it
    carries the settings that task runs with."""
    spark = _active_session()
    settings = session_settings(spark) if spark is not None else _installed

    def run_with_settings(batches: Iterator[Any]) -> Iterator[Any]:
        install(settings)
        try:
            yield from body(batches)
        finally:
            install(None)

    return run_with_settings


def current_settings() -> FileSystemSettings:
    """The installed settings in a task; the active session's on the driver."""
    return _installed if _installed is not None else session_settings()


@functools.lru_cache(maxsize=64)
def _s3(options: tuple[tuple[str, Any], ...], bucket: str) -> Any:
    """One S3 filesystem per set of options in a process (creating one is not free)."""
    from pyarrow import fs

    kwargs = dict(options)
    if "region" not in kwargs and "endpoint_override" not in kwargs:
        with contextlib.suppress(Exception):  # cannot ask: S3's default region, as pyarrow
            kwargs["region"] = fs.resolve_s3_region(bucket)
    return fs.S3FileSystem(**kwargs)


def open_file(uri: str, settings: FileSystemSettings | None = None) -> tuple[Any, str]:
    """(filesystem, path) for a Hadoop-style URI. `s3a://`, `s3n://` and `s3://` follow the S3A
    settings (`settings`, else those the task carried, else the active session's)."""
    from pyarrow import fs

    if uri.startswith("file:"):
        return fs.LocalFileSystem(), "/" + uri[len("file:") :].lstrip("/")
    if uri.startswith("/"):
        return fs.LocalFileSystem(), uri
    for scheme in S3_SCHEMES:
        if uri.startswith(scheme):
            location = uri[len(scheme) :]
            bucket = location.split("/", 1)[0]
            chosen = settings if settings is not None else current_settings()
            options = s3_options(chosen.s3a_for(bucket))
            if not options:
                return fs.FileSystem.from_uri("s3://" + location)
            return _s3(tuple(sorted(options.items())), bucket), unquote(location)  # as `from_uri` does
    return fs.FileSystem.from_uri(uri)
