"""The one error hierarchy of walctl; each class carries its exit code (docs/CLI.md).

Lower layers raise these with the position they know (an offset, a byte
position); the layer that knows the device path or object key adds it with
``where``. The CLI turns any of them into one line on stderr and the exit code.
"""

from __future__ import annotations

from typing import NamedTuple


class ExitCode(NamedTuple):
    """One documented exit status: its number, its name in code, and what it means to an operator."""

    code: int
    name: str
    meaning: str


# The one exit-code table (docs/CLI.md "Exit codes"): the error classes below, the CLI's
# boundary (walctl.cli), the man pages (tools/manpage.py) and selftest all take theirs from here.
EXIT_CODES: tuple[ExitCode, ...] = (
    ExitCode(0, "EXIT_OK", "Success. A torn tail after a crash is normal: it is reported, and the exit status "
                           "is still 0."),
    ExitCode(1, "EXIT_INTERNAL", "Internal error: a bug. The only case that may print a traceback, and only "
                                 "with --debug."),
    ExitCode(2, "EXIT_USAGE", "Usage: a bad option, a bad size, an unreadable input file."),
    ExitCode(3, "EXIT_CORRUPT", "Corruption: a checksum, magic or bounds check failed where data should be "
                                "valid."),
    ExitCode(4, "EXIT_NOT_FOUND", "Not found, or not ours: no such device or object, no valid WAL header, not a "
                                  "walctl object; a missing prerequisite (compact without pyspark, pip install "
                                  "'walctl[spark]', or without Java)."),
    ExitCode(5, "EXIT_REFUSED", "Refused: busy (another writer holds the device), mounted, has a filesystem, "
                                "already initialised, or would destroy data without --force."),
    ExitCode(6, "EXIT_IO", "I/O or store failure after retries (EIO, network, S3 5xx, access denied)."),
    ExitCode(7, "EXIT_FULL", "Full: the WAL has no room; trim or upload first."),
    ExitCode(8, "EXIT_TRIM_PENDING", "Trim pending: upload committed its objects, but the WAL was not trimmed "
                                     "within --trim-timeout (a writer holds it and did not take the trim); rerun "
                                     "upload (it skips what is committed)."),
)
EXIT_OK, EXIT_INTERNAL, EXIT_USAGE, EXIT_CORRUPT, EXIT_NOT_FOUND, EXIT_REFUSED, EXIT_IO, EXIT_FULL, \
    EXIT_TRIM_PENDING = (e.code for e in EXIT_CODES)
# Statuses a shell would report for a signal: 128 + the signal's number.
EXIT_SIGINT, EXIT_BROKEN_PIPE, EXIT_SIGTERM = 128 + 2, 128 + 13, 128 + 15
SIGNAL_EXITS: tuple[str, ...] = (
    "Interrupted by SIGINT, a command exits 130, by SIGTERM 143, after finishing or rolling back the step "
    "in progress (one error line; with --json the summary carries the error); when the reader of its "
    "standard output goes away, 141 (as a shell reports SIGPIPE).",
)


class WalctlError(Exception):
    """Base of every error walctl reports to an operator.

    ``summary``: the command's result object so far, when it had one; with --json the CLI
    prints it with the error added (the closing summary line of an NDJSON stream).
    """

    exit_code = EXIT_INTERNAL
    summary: dict | None = None  # also set by __init__; here for subclasses that do not call it

    def __init__(self, what: str, *, where: str | None = None, hint: str | None = None,
                 offset: int | None = None, expected: object = None, found: object = None,
                 summary: dict | None = None):
        super().__init__(what)
        self.what = what
        self.where = where
        self.hint = hint
        self.offset = offset
        self.expected = expected
        self.found = found
        self.summary = summary

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

    exit_code = EXIT_USAGE


class CorruptionError(WalctlError):
    """A checksum, magic or bounds check failed where data should be valid."""

    exit_code = EXIT_CORRUPT


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

    exit_code = EXIT_NOT_FOUND


class RefusedError(WalctlError):
    """Busy, mounted, has a filesystem, already initialised, or would destroy data without --force."""

    exit_code = EXIT_REFUSED


class IOFailure(WalctlError):
    """I/O or store failure after retries (EIO, network, S3 5xx, access denied)."""

    exit_code = EXIT_IO


class FullError(WalctlError):
    """The WAL has no room: trim or upload first."""

    exit_code = EXIT_FULL


class TrimPendingError(WalctlError):
    """An upload committed, but its WAL could not be trimmed in time (the writer did not take it)."""

    exit_code = EXIT_TRIM_PENDING
