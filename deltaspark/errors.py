"""deltaspark's exception hierarchy.

Every failure a user can act on is one of these, so callers can catch ``DeltaSparkError`` and
tell "your table is broken / unsupported" apart from a bug or a cluster problem.
"""

from __future__ import annotations

from collections.abc import Iterable


class DeltaSparkError(Exception):
    """Base class of every error deltaspark raises on purpose."""


class TableNotFoundError(DeltaSparkError):
    """The path is not a Delta table: no `_delta_log`, or a log without any commit or checkpoint."""

    def __init__(self, path: str, reason: str = "no _delta_log directory") -> None:
        self.path = path
        super().__init__(f"Not a Delta table: {path} ({reason})")


class VersionNotFoundError(DeltaSparkError):
    """The requested version cannot be reconstructed from the log that is present."""

    def __init__(self, version: int, earliest: int | None, latest: int | None, detail: str = "") -> None:
        self.version, self.earliest, self.latest = version, earliest, latest
        msg = f"Version {version} is not available"
        if earliest is not None and latest is not None:
            msg += f"; versions {earliest} to {latest} can be read"
        if detail:
            msg += f" ({detail})"
        super().__init__(msg)


class TimestampOutOfRangeError(DeltaSparkError):
    """A timestamp for time travel lies before the first or after the last commit."""


class NonContiguousVersionsError(DeltaSparkError):
    """Commits needed to reconstruct a version are missing from `_delta_log`."""

    def __init__(self, path: str, missing: Iterable[int], detail: str = "") -> None:
        self.path = path
        self.missing = sorted(missing)
        shown = ", ".join(str(v) for v in self.missing[:20])
        more = f" and {len(self.missing) - 20} more" if len(self.missing) > 20 else ""
        super().__init__(
            f"Versions are not contiguous in {path}: missing commit(s) {shown}{more}"
            + (f" ({detail})" if detail else "")
        )


class CorruptLogError(DeltaSparkError):
    """A log file (commit, checkpoint, sidecar, `_last_checkpoint`) cannot be interpreted."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"Corrupt Delta log file {path}: {reason}")


class MissingActionError(DeltaSparkError):
    """The log reconstructs a version without a `protocol` or `metaData` action."""

    def __init__(self, path: str, version: int, action: str) -> None:
        self.path, self.version, self.action = path, version, action
        super().__init__(f"Table {path} at version {version} has no `{action}` action in its log")


class UnsupportedFeatureError(DeltaSparkError):
    """The table needs a protocol version or table feature that deltaspark does not implement."""

    def __init__(self, message: str, features: Iterable[str] = ()) -> None:
        self.features = sorted(features)
        super().__init__(message)


class InvalidArgumentError(DeltaSparkError, ValueError):
    """An argument to a deltaspark API is malformed or contradictory."""
