"""Canonical file paths, so that one data file referenced in different spellings is one key.

`add`/`remove` paths are RFC 2396 URIs, relative to the table root or absolute. The canonical key
is the decoded absolute path with `file:` spellings unified (`file:///x`, `file://localhost/x`,
`file:/x`). It is a Spark expression: no UDF, no driver round trip.

The expressions are written as SQL text and handed to Spark in one `F.expr`: three JVM round trips
each, where building them from Column functions (`F.col`, `when`, `contains`, ...: each a call into
the JVM) took ~70 for a canonical path and ~80 for a join key - made by every replay and by every
read of a merge, a delete or an update, several times each. Literals taken from the table root go
in as hexadecimal bytes (`CAST(X'..' AS STRING)`), which every setting of Spark's parser reads the
same way whatever the root holds (quotes, backslashes).
"""

from __future__ import annotations

import functools
import re
from urllib.parse import unquote

from pyspark.sql import Column
from pyspark.sql import functions as F

_SCHEME_RE = r"^[a-zA-Z][a-zA-Z0-9+.-]*:"
_FILE_FORMS_RE = r"^file:(//(localhost)?)?/"


@functools.lru_cache(maxsize=64)
def normalize_root(root: str) -> str:
    """A table root in canonical form, without a trailing slash (cached: a driver replay asks it
    once per file)."""
    root = re.sub(_FILE_FORMS_RE, "file:/", root.rstrip("/"))
    return root or "/"


def unify_file_uri(path: Column) -> Column:
    """`file:///x`, `file://localhost/x` and `file:/x` as one spelling, `file:/x`."""
    return F.regexp_replace(path, _FILE_FORMS_RE, "file:/")


def _scheme_and_authority(root: str) -> str:
    m = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*:(//[^/]*)?)", root)
    return m.group(1) if m else ""


def _text(value: str) -> str:
    """`value` as a SQL string literal: plainly when it holds neither a quote nor a backslash (the
    parser's escape settings then cannot matter), else as its UTF-8 bytes in hexadecimal."""
    if value.isascii() and "'" not in value and "\\" not in value:
        return f"'{value}'"
    return f"CAST(X'{value.encode('utf-8').hex()}' AS STRING)"


def _decoder() -> str:
    """Spark's URL decoder that yields null on a malformed escape where there is one (Spark 4)."""
    return "try_url_decode" if hasattr(F, "try_url_decode") else "url_decode"


def canonical_path_sql(path: str, table_root: str) -> str:
    """`canonical_path` as SQL text, `path` a SQL expression of the logged path (a column's name,
    dotted for a field)."""
    root = normalize_root(table_root)
    p = f"({path})"
    # RFC 2396 decoding: `%XX` escapes only (a literal `+` stays a `+`)
    decoded = (
        f"(CASE WHEN contains({p}, '%') THEN {_decoder()}(regexp_replace({p}, '[+]', '%2B')) ELSE {p} END)"
    )
    absolute = f"regexp_replace({decoded}, '{_FILE_FORMS_RE}', 'file:/')"
    rooted_at_slash = f"concat({_text(_scheme_and_authority(root))}, {decoded})"
    relative = f"concat({_text(root + '/')}, {decoded})"
    general = (  # the regular expression only where it may match
        f"(CASE WHEN contains({decoded}, ':') AND {decoded} RLIKE '{_SCHEME_RE}' THEN {absolute}"
        f" WHEN startswith({decoded}, '/') THEN {rooted_at_slash} ELSE {relative} END)"
    )
    if root.endswith("/") or _absolute_root(table_root) is None:
        return general
    # A path under the (canonical) root without an escape is canonical already - as every path a
    # scan reports for a table's own files is: no regular expression per row for those.
    under = f"startswith({p}, {_text(root + '/')}) AND NOT contains({p}, '%')"
    return f"(CASE WHEN {under} THEN {p} ELSE {general} END)"


def canonical_path(path: str, table_root: str) -> Column:
    """The canonical key of a logged path (see the module docstring); `path` a SQL expression of
    it (a column's name, dotted for a field)."""
    return F.expr(canonical_path_sql(path, table_root))


def _java_quoted(text: str) -> str:
    """`text` as a literal inside a Java regular expression (`Pattern.quote`)."""
    return "\\Q" + text.replace("\\E", "\\E\\\\E\\Q") + "\\E"


def _absolute_root(table_root: str) -> str | None:
    """The table root in canonical form when it is absolute (a leading `/` or a scheme), as every
    resolved table's is; else None."""
    root = normalize_root(table_root)
    return root if root.startswith("/") or re.match(_SCHEME_RE, root) else None


def _join_key_of_canonical_sql(canonical: str, table_root: str) -> str:
    root = _absolute_root(table_root)
    if root is None:
        return canonical
    not_absolute = r"(?![a-zA-Z][a-zA-Z0-9+.-]*:|/)"
    pattern = "^" + _java_quoted(root + "/") + not_absolute
    return f"regexp_replace({canonical}, {_text(pattern)}, '')"


def join_key_of_canonical(canonical: str, table_root: str) -> Column:
    """The key `join_key` gives a path, from its `canonical_path` (`canonical`: a SQL expression of
    it): the canonical path with the table root and `/` stripped, unless what remains could be read
    as an absolute path (a leading `/` or a scheme). Every canonical path is absolute and a stripped
    one is not, so two keys are equal exactly when the canonical paths are. Under a root that is
    not absolute (never the case for a resolved table) the key is the canonical path itself."""
    return F.expr(_join_key_of_canonical_sql(f"({canonical})", table_root))


def join_key(path: str, table_root: str) -> Column:
    """A key of a logged path (`path`: a SQL expression of it), equal for two paths exactly when
    their `canonical_path`s are, and much cheaper to compute: a key to join on.

    A path logged without an escape, not rooted at `/` and not starting with `file:` or the table
    root's scheme - as writers log nearly every path - is its own key: one scan of the string (for
    `%`) and no string built. Such a path is either plain relative (its canonical path is the root
    joined to it, which `join_key_of_canonical` strips back to it) or a URI in another scheme (its
    own canonical path, not under the root, so not stripped). Any other path is keyed by
    `join_key_of_canonical`. Building the canonical path of every row was a quarter of a big
    checkpoint's replay, and a second scan of each path (for `:`) another sixth.
    """
    keyed = _join_key_of_canonical_sql(canonical_path_sql(path, table_root), table_root)
    root = _absolute_root(table_root)
    if root is None:
        return F.expr(keyed)
    p = f"({path})"
    as_logged = f"NOT contains({p}, '%') AND NOT startswith({p}, '/') AND NOT startswith({p}, 'file:')"
    scheme = re.match(_SCHEME_RE, root)
    if scheme and scheme.group(0) != "file:":
        as_logged += f" AND NOT startswith({p}, {_text(scheme.group(0))})"
    return F.expr(f"CASE WHEN {as_logged} THEN {p} ELSE {keyed} END")


_ESCAPE_RUN = re.compile(r"(?:%[0-9a-fA-F]{2})+")


def path_key(path: str, table_root: str) -> str | None:
    """`canonical_path` computed on the driver, for logs replayed there (`driver_replay`); `None`
    where Java's URL decoding might differ from Python's (a malformed escape or UTF-8 sequence),
    so that such a log is left to Spark."""
    decoded = path
    if "%" in path:
        if path.count("%") != sum(len(run) // 3 for run in _ESCAPE_RUN.findall(path)):
            return None  # a `%` that does not start an escape: Spark's decoder fails on it
        try:
            decoded = unquote(path, errors="strict")
        except UnicodeDecodeError:
            return None
    return _rooted(decoded, table_root)


_SCHEME = re.compile(_SCHEME_RE)
_FILE_FORMS = re.compile(_FILE_FORMS_RE)


def _rooted(decoded: str, table_root: str) -> str:
    """Called once per file of a replay on the driver: compiled patterns, the root normalized once."""
    root = normalize_root(table_root)
    if ":" in decoded and _SCHEME.match(decoded):
        return _FILE_FORMS.sub("file:/", decoded)
    if decoded.startswith("/"):
        return _scheme_and_authority(root) + decoded
    return root + "/" + decoded


def absolute_path(path: str, table_root: str) -> str:
    """Driver-side twin of `canonical_path` for the few paths handled on the driver (sidecars)."""
    return _rooted(unquote(path) if "%" in path else path, table_root)
