"""The one error hierarchy of walctl; each class carries its exit code (docs/CLI.md).

Lower layers raise these with the position they know (an offset, a byte
position); the layer that knows the device path or object key adds it with
``where``. The CLI turns any of them into one line on stderr and the exit code.
"""

from __future__ import annotations


class WalctlError(Exception):
    """Base of every error walctl reports to an operator."""

    exit_code = 1

    def __init__(self, what: str, *, where: str | None = None, hint: str | None = None,
                 offset: int | None = None, expected: object = None, found: object = None):
        super().__init__(what)
        self.what = what
        self.where = where
        self.hint = hint
        self.offset = offset
        self.expected = expected
        self.found = found

    def at(self, where: str) -> "WalctlError":
        """Name the device, file or object the error is about (keeps an existing, more precise one)."""
        if self.where is None:
            self.where = where
        else:
            self.where = f"{where} {self.where}" if not self.where.startswith(where) else self.where
        return self

    def line(self) -> str:
        """The one stderr line: ``walctl: error: <what>, <where> (<hint>)``."""
        text = f"walctl: error: {self.what}"
        if self.where:
            text += f", {self.where}"
        if self.hint:
            text += f" ({self.hint})"
        return text

    def to_json(self) -> dict:
        out: dict = {"code": self.exit_code, "message": self.line().removeprefix("walctl: error: ")}
        if self.offset is not None:
            out["offset"] = self.offset
        return out


class UsageError(WalctlError):
    """Bad option, bad size, unreadable input file."""

    exit_code = 2


class CorruptionError(WalctlError):
    """A checksum, magic or bounds check failed where data should be valid."""

    exit_code = 3


class FormatError(CorruptionError):
    """A decoder refused its input; carries the byte position and expected/found values.

    ``field`` names the structure's field a bounds check refused (e.g. "record bodyOffset"),
    so a reader can tell causes apart without parsing the message.
    """

    def __init__(self, what: str, *, field: str | None = None, **kwargs):
        super().__init__(what, **kwargs)
        self.field = field


class TruncatedError(FormatError):
    """Fewer bytes than the structure needs."""


class ZeroedError(FormatError):
    """All bytes zero: never written, or wiped (a torn write often looks like this)."""


class BadMagicError(FormatError):
    """The magic number is not one this decoder knows."""


class ChecksumError(FormatError):
    """A stored CRC does not match the bytes it covers."""


class BoundsError(FormatError):
    """A field holds a value outside what the format allows."""


class NotFoundError(WalctlError):
    """No such device or object, no valid WAL header, not a walctl object."""

    exit_code = 4


class RefusedError(WalctlError):
    """Busy, mounted, has a filesystem, already initialised, or would destroy data without --force."""

    exit_code = 5


class IOFailure(WalctlError):
    """I/O or store failure after retries (EIO, network, S3 5xx, access denied)."""

    exit_code = 6


class FullError(WalctlError):
    """The WAL has no room: trim or upload first."""

    exit_code = 7


class TrimPendingError(WalctlError):
    """An upload committed, but its WAL could not be trimmed in time (the writer did not take it)."""

    exit_code = 8
