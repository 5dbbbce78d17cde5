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


class Size:
    """A size in bytes (``4096``, ``4KiB``, ``1MiB``, ``2GiB``, ``1GB``) between ``min`` and ``max``."""

    __name__ = "size"

    def __init__(self, min: int = 0, max: int | None = None, multiple_of: int | None = None):
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

    def __init__(self, min: float = 0.0, max: float | None = None):
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
