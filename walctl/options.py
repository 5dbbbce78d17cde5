"""Option validation in one place: every value is checked while the command line is parsed.

A command declares an option's kind and bounds once (``size_option``, ``duration_option``,
``positive_option`` ...); a bad value then stops the run before anything is opened, created
or written (``--dry-run`` included) with one line and exit 2::

    walctl: error: invalid value for --block-size: '0' is below the minimum 1 B, ... (hint; see ...)

Values from ``WALCTL_<OPTION>`` variables go through the same checks. Relations between
options (``--from`` below ``--to``) use ``check_order``, called first thing in the command.

Options other branches add fit in by using these parsers: ``typer.Option(..., parser=Size(...))``.
"""

from __future__ import annotations

import re
from typing import Callable

try:  # typer >= 0.29 carries its own copy of click
    from typer._click.exceptions import BadParameter
except ImportError:  # pragma: no cover
    from click.exceptions import BadParameter

from walctl.errors import UsageError
from walctl.sizes import format_size, parse_duration, parse_size


class OptionError(BadParameter):
    """A bad option value: the CLI prints ``walctl: error: <what>, <option> (<hint>; see --help)``."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


def _duration_text(seconds: float) -> str:
    if seconds == 0:
        return "0s"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds * 1000:g}ms" if seconds < 1 else f"{seconds:g}s"


# The largest value any size, count or offset option takes without a smaller maximum of its own:
# the formats' offsets, ids and lengths are signed 64-bit (FORMATS.md).
INT_MAX = (1 << 63) - 1
# A duration without a maximum of its own stops at a year: a longer timeout or grace period is a
# typo (2^63 seconds overflow every clock walctl waits on).
DURATION_MAX = 365 * 86400.0


class Size:
    """A size in bytes (``4096``, ``4KiB``, ``1MiB``, ``2GiB``, ``1GB``) between ``min`` and ``max``."""

    __name__ = "size"

    def __init__(self, min: int = 0, max: int | None = INT_MAX, multiple_of: int | None = None):
        self.min, self.max, self.multiple_of = min, max, multiple_of

    def hint(self) -> str:
        upper = f" to {format_size(self.max)}" if self.max is not None else " or more"
        step = f", a multiple of {self.multiple_of}" if self.multiple_of else ""
        return f"a size from {format_size(self.min)}{upper}{step}: 4096, 256KiB, 1MiB, 2GiB"

    def __call__(self, value: str | int) -> int:
        try:
            n = parse_size(value)
        except UsageError:
            raise OptionError(f"{value!r} is not a size", self.hint()) from None
        if n < self.min:
            raise OptionError(f"{value!r} is below the minimum {format_size(self.min)}", self.hint())
        if self.max is not None and n > self.max:
            raise OptionError(f"{value!r} is above the maximum {format_size(self.max)}", self.hint())
        if self.multiple_of and n % self.multiple_of:
            raise OptionError(f"{value!r} is not a multiple of {self.multiple_of}", self.hint())
        return n


class Duration:
    """A duration in seconds with a unit (``500ms``, ``90s``, ``30m``, ``1h``, ``2d``; a bare number is seconds)."""

    __name__ = "duration"

    def __init__(self, min: float = 0.0, max: float | None = DURATION_MAX):
        self.min, self.max = min, max

    def hint(self) -> str:
        upper = f" to {_duration_text(self.max)}" if self.max is not None else " or more"
        return f"a duration from {_duration_text(self.min)}{upper}, with a unit: 500ms, 90s, 30m, 1h, 2d"

    def __call__(self, value: str | float) -> float:
        if isinstance(value, (int, float)):
            seconds = float(value)
        else:
            try:
                seconds = parse_duration(value)
            except UsageError:
                raise OptionError(f"{value!r} is not a duration", self.hint()) from None
        if seconds < self.min:
            raise OptionError(f"{value!r} is below the minimum {_duration_text(self.min)}", self.hint())
        if self.max is not None and seconds > self.max:
            raise OptionError(f"{value!r} is above the maximum {_duration_text(self.max)}", self.hint())
        return seconds


class Rate:
    """A rate in bytes per second: a size, optionally with ``/s`` (``50MiB/s``, ``50MiB``, ``1GB/s``).

    Args:
        bare: what a bare number means, in bytes per second (``1 << 20``: MiB/s, an option's older
            unit); None: a bare number other than 0 is refused (50 would be 50 B/s: a typo).
        zero_unlimited: ``0`` means no limit (the value None); otherwise 0 is below the minimum.
    """

    __name__ = "rate"

    def __init__(self, bare: int | None = None, zero_unlimited: bool = False):
        self.bare, self.zero_unlimited = bare, zero_unlimited

    def hint(self) -> str:
        bare = " (a bare number is MiB/s)" if self.bare == 1 << 20 else ""
        zero = "; 0: unlimited" if self.zero_unlimited else ""
        return f"a size per second{bare}: 50MiB/s, 200MB/s, 1GiB/s{zero}"

    def __call__(self, value: str | float | None) -> float | None:
        if value is None or isinstance(value, (int, float)):
            return value
        text = value.strip().removesuffix("/s")
        if _BARE_NUMBER.fullmatch(text):
            number = float(text)
            if number == 0 and self.zero_unlimited:
                return None
            if self.bare is None:
                raise OptionError(f"{value!r} has no unit", self.hint())
            rate = number * self.bare
        else:
            try:
                rate = float(parse_size(text))
            except UsageError:
                raise OptionError(f"{value!r} is not a rate", self.hint()) from None
            if rate == 0 and self.zero_unlimited:
                return None
        if not 0 < rate <= INT_MAX:
            raise OptionError(f"{value!r} is outside 1 B/s to 8 EiB/s", self.hint())
        return rate


_BARE_NUMBER = re.compile(r"[0-9]+(\.[0-9]+)?")
_DIGITS = re.compile(r"[0-9]+")


def stream_offset(value: str) -> str:
    """A ``STREAM:OFFSET`` pair (``7:1000``; ``7=1000`` is the older spelling, said on stderr),
    both within 0 to 2^63-1; returned as ``STREAM:OFFSET``."""
    import sys

    hint = "STREAM:OFFSET, stream offsets as --accept-gap's STREAM:FROM-TO: 7:1000"
    if not isinstance(value, str):
        return value
    text = value.strip()
    if ":" not in text and "=" in text:
        print(f"walctl: warning: {value!r}: STREAM=OFFSET is deprecated, write STREAM:OFFSET "
              f"(as --accept-gap does)", file=sys.stderr)
        text = text.replace("=", ":", 1)
    stream, _, offset = text.partition(":")
    if not (_DIGITS.fullmatch(stream) and _DIGITS.fullmatch(offset)):
        raise OptionError(f"{value!r} is not STREAM:OFFSET", hint)
    if int(stream) > INT_MAX or int(offset) > INT_MAX:
        raise OptionError(f"{value!r} is above the maximum {INT_MAX}", hint)
    return f"{int(stream)}:{int(offset)}"


_SPARK_MASTER = re.compile(r"^(local(\[(\*|\d+)(,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]|(spark|k8s|mesos)://\S+|yarn)$")


def spark_master(value: str) -> str:
    """A Spark master URL: local, local[N], local[*], local[N,F], local-cluster[N,C,M], spark://host:port,
    k8s://..., mesos://..., yarn."""
    if not isinstance(value, str) or not _SPARK_MASTER.match(value):
        raise OptionError(f"{value!r} is not a Spark master URL",
                          "local, local[4], local[*], spark://host:7077, k8s://https://host, yarn")
    return value


def bounds_callback(check: Callable[..., object]) -> Callable:
    """A typer option callback running ``check(value, option_name)`` (a walctl.bounds function;
    None and lists handled); its UsageError becomes click's usage error (one line, exit 2)."""

    def run(ctx, param, value):
        if value is None:
            return value
        name = param.opts[0] if getattr(param, "opts", None) else param.name
        try:
            if isinstance(value, (list, tuple)):
                return [check(v, name) for v in value]
            return check(value, name)
        except UsageError as exc:
            raise BadParameter(exc.what + (f" ({exc.hint})" if exc.hint else "")) from None

    return run


def check_order(low: int | float | None, high: int | float | None, low_name: str, high_name: str) -> None:
    """Refuse ``low >= high`` for a half-open range [low, high) given as two options (exit 2)."""
    if low is not None and high is not None and low >= high:
        raise UsageError(f"{low_name} {low} is not below {high_name} {high}",
                         hint=f"{high_name} is exclusive: give {low_name} < {high_name}, or drop one")
