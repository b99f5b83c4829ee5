"""Duration table properties such as `delta.deletedFileRetentionDuration = "interval 1 week"`.

Delta stores them as Spark calendar-interval strings. Months and years have no fixed length, so
(like the reference implementation) they are rejected for retention durations.
"""

from __future__ import annotations

import re

from deltaspark.errors import InvalidArgumentError

_UNIT_MS = {
    "microsecond": 0.001,
    "millisecond": 1,
    "second": 1000,
    "minute": 60_000,
    "hour": 3_600_000,
    "day": 86_400_000,
    "week": 7 * 86_400_000,
}
_PAIR = re.compile(r"([-+]?\d+(?:\.\d+)?)\s*([a-zA-Z]+)")


def parse_interval_ms(text: str) -> int:
    """Milliseconds in an interval string like `interval 1 week 2 days` or `30 days`."""
    body = text.strip()
    if body.lower().startswith("interval"):
        body = body[len("interval") :].strip()
    pairs = _PAIR.findall(body)
    if not pairs or _PAIR.sub("", body).strip():
        raise InvalidArgumentError(f"Cannot parse the interval {text!r}")
    total = 0.0
    for amount, unit in pairs:
        key = unit.lower().rstrip("s")
        if key not in _UNIT_MS:
            raise InvalidArgumentError(
                f"Interval {text!r}: unit {unit!r} is not a fixed-length duration "
                f"(use {', '.join(u + 's' for u in _UNIT_MS)})"
            )
        total += float(amount) * _UNIT_MS[key]
    return int(total)


DEFAULT_DELETED_FILE_RETENTION = "interval 1 week"
DEFAULT_LOG_RETENTION = "interval 30 days"
