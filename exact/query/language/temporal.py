"""Times and durations of the query language, as integer UTC microseconds (the event model of docs/contract.md §1).

``WITHIN`` takes ``number unit`` with unit ms | s | sec | min | h | hour | d | day, each optionally with a
plural ``s`` (plus the spelled-out second, minute and millisecond).  Times (``BETWEEN``, ``x.ts`` comparisons)
are ISO-8601 strings; one without a UTC offset is read as UTC, a bare date as its midnight UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation

MICROS_PER_MS = 1_000
MICROS_PER_S = 1_000_000

#: Unit (lower-case) → microseconds.
UNITS: dict[str, int] = {}
for _names, _micros in (
    # docs/contract.md §2 allows a plural "s" on every unit, so the odd "mss", "ss", "hs", "ds" are accepted too.
    (("ms", "mss", "msec", "msecs", "millisecond", "milliseconds"), MICROS_PER_MS),
    (("s", "ss", "sec", "secs", "second", "seconds"), MICROS_PER_S),
    (("min", "mins", "minute", "minutes"), 60 * MICROS_PER_S),
    (("h", "hs", "hour", "hours", "hr", "hrs"), 3_600 * MICROS_PER_S),
    (("d", "ds", "day", "days"), 86_400 * MICROS_PER_S),
):
    for _name in _names:
        UNITS[_name] = _micros

#: The longest ``WITHIN`` duration accepted: 100 years of 365.25 days.  Longer is surely a mistake.
MAX_WITHIN_MICROS = 36_525 * 86_400 * MICROS_PER_S

#: The largest ``WITHIN n EVENTS`` accepted.
MAX_WITHIN_EVENTS = 10**12

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MICRO = timedelta(microseconds=1)

#: The instants an ISO string can name (years 1 … 9999), in microseconds.
MIN_TIME_MICROS = (datetime(1, 1, 1, tzinfo=UTC) - _EPOCH) // _ONE_MICRO
MAX_TIME_MICROS = (datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC) - _EPOCH) // _ONE_MICRO

#: Canonical printing order: the largest unit that divides the duration exactly.
_PRINT_UNITS = (("day", 86_400 * MICROS_PER_S), ("hour", 3_600 * MICROS_PER_S), ("min", 60 * MICROS_PER_S),
                ("s", MICROS_PER_S), ("ms", MICROS_PER_MS))


def duration_micros(number: str, unit: str) -> int:
    """``number unit`` → microseconds; ValueError saying what is wrong (unknown unit, fractional micros)."""
    scale = UNITS.get(unit.lower())
    if scale is None:
        raise ValueError(f"unknown time unit '{unit}'; expected one of ms, s, sec, min, h, hour, d, day "
                         "(optionally plural), or EVENTS")
    try:
        micros = Decimal(number) * scale
    except InvalidOperation as exc:  # the grammar only lets numbers through; kept for direct callers
        raise ValueError(f"'{number}' is not a number") from exc
    if micros != micros.to_integral_value():
        raise ValueError(f"duration {number} {unit} is not a whole number of microseconds")
    return int(micros)


def format_duration(micros: int) -> str:
    """Canonical text of a positive duration: the largest exact unit, else fractional milliseconds."""
    for name, scale in _PRINT_UNITS:
        if micros % scale == 0:
            count = micros // scale
            plural = "s" if count != 1 and name in ("day", "hour") else ""
            return f"{count} {name}{plural}"
    whole, frac = divmod(micros, MICROS_PER_MS)
    return f"{whole}.{frac:03d}".rstrip("0") + " ms"


def iso_to_micros(text: str) -> int:
    """ISO-8601 → UTC microseconds since the epoch; ValueError when it is not an ISO-8601 time."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError as exc:
        raise ValueError(f"'{text}' is not an ISO-8601 time (e.g. '2012-01-01T09:30:00Z')") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // _ONE_MICRO


def micros_to_iso(micros: int) -> str:
    """UTC microseconds → ISO-8601 with ``+00:00`` (microseconds shown only when not zero)."""
    return (_EPOCH + timedelta(microseconds=micros)).isoformat()


def is_printable_time(micros: int) -> bool:
    return MIN_TIME_MICROS <= micros <= MAX_TIME_MICROS
