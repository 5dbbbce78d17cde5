"""Trim hand-off (FORMATS.md 1.7): a running writer takes trims from other processes.

A writer holds the device's lock for its whole run, so ``walctl upload`` in another process
cannot open the WAL to trim it after its commit. The writer listens on a Linux abstract
unix socket named after the device (no file to leave behind; it vanishes with the process):

    "\\0walctl-trim/<st_dev>:<st_ino>"   a regular file
    "\\0walctl-trim/blk:<st_rdev>"       a block device

Protocol, one request per connection, ASCII lines:
    client -> "TRIM <offset> UPLOADED\\n"
    writer -> "OK <previous trim offset>\\n"         trimmed, durable (header + checkpoint)
            | "RETRY <reason>\\n"                     not acknowledged yet: ask again shortly
            | "ERR <exit code> <message>\\n"          refused (not a record, behind the trim point)
Only a peer of the writer's own uid (or root) is served (SO_PEERCRED).
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import struct
import threading
import time

from walctl.errors import EXIT_REFUSED, UsageError, WalctlError

PREFIX = "walctl-trim/"
ACCEPT_POLL_S = 0.2  # how often the listener thread looks whether it should stop
REQUEST_TIMEOUT_S = 5.0  # one request/answer exchange
RETRY_PAUSE_S = 0.1


def address(path: str) -> bytes:
    """The abstract socket name of the WAL at ``path``."""
    st = os.stat(path)
    if stat.S_ISBLK(st.st_mode):
        name = f"{PREFIX}blk:{st.st_rdev}"
    else:
        name = f"{PREFIX}{st.st_dev}:{st.st_ino}"
    return b"\0" + name.encode()


class TrimListener:
    """Serve trim requests for ``writer`` (a WalWriter) until ``close()``."""

    def __init__(self, path: str, writer, on_trim=None):
        self.writer = writer
        self.on_trim = on_trim
        self.trims = 0
        self._stop = threading.Event()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self._address = address(path)
        try:
            self._sock.bind(self._address)
        except OSError:
            self._sock.close()
            raise
        self._sock.listen(8)
        self._sock.settimeout(ACCEPT_POLL_S)
        self._thread = threading.Thread(target=self._loop, name="walctl-trim-listener", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._wake()
            self._thread.join()
        self._sock.close()

    def _wake(self) -> None:
        """Connect to the listener: its accept returns now, not at its next poll (up to 0.2 s per close)."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as sock:
                sock.settimeout(REQUEST_TIMEOUT_S)
                sock.connect(self._address)
        except OSError:
            pass  # it polls: it stops within ACCEPT_POLL_S anyway

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (socket.timeout, BlockingIOError):
                continue
            except OSError:
                return
            if self._stop.is_set():  # close() woke us (or a client came too late): served by nobody
                conn.close()
                return
            with conn:
                try:
                    conn.settimeout(REQUEST_TIMEOUT_S)
                    refusal = self._refusal(conn)
                    if refusal is None:
                        conn.sendall(self._answer(conn).encode())
                        continue
                    conn.sendall(refusal.encode())
                    # refused before its request was read: read it now (or the client's close), so
                    # the client's send never meets a closed socket (EPIPE) before it reads the refusal
                    conn.shutdown(socket.SHUT_WR)
                    _read_line(conn)
                except OSError:
                    continue  # the client went away: it will ask again

    @staticmethod
    def _refusal(conn) -> str | None:
        """The answer to a peer that may not trim (its uid is neither root's nor ours), else None."""
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _, uid, _ = struct.unpack("3i", creds)
        if uid not in (0, os.getuid()):
            return f"ERR {EXIT_REFUSED} refused: uid {uid} may not trim this WAL\n"
        return None

    def _answer(self, conn) -> str:
        """Read the peer's request and carry it out: the answer line."""
        line = _read_line(conn)
        parts = line.split()
        if len(parts) < 2 or parts[0] != "TRIM" or not parts[1].isdigit():
            return "ERR 2 bad request\n"
        offset = int(parts[1])
        if offset >= self.writer.acked_end:
            return f"RETRY offset {offset} is not acknowledged yet\n"
        try:
            previous = self.writer.trim_to(offset, uploaded="UPLOADED" in parts[2:])
        except WalctlError as exc:
            return f"ERR {exc.exit_code} {exc.what}\n"
        self.trims += 1
        if self.on_trim is not None:
            self.on_trim(offset)
        return f"OK {previous}\n"


def _read_line(conn) -> str:
    data = b""
    while not data.endswith(b"\n") and len(data) < 256:
        chunk = conn.recv(256)
        if not chunk:
            break
        data += chunk
    return data.decode("ascii", "replace").strip()


def start_listener(path: str, writer, on_trim=None) -> TrimListener | None:
    """A listener for the writer of ``path``, or None when the name is taken (never for a locked WAL)."""
    try:
        return TrimListener(path, writer, on_trim)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return None
        raise


def request_trim(path: str, offset: int, *, uploaded: bool = True) -> tuple[str, str]:
    """Ask the writer of ``path`` to trim; returns ("OK"|"RETRY"|"ERR"|"ABSENT", rest of the answer)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.settimeout(REQUEST_TIMEOUT_S)
        try:
            sock.connect(address(path))
        except (ConnectionRefusedError, FileNotFoundError):
            return "ABSENT", "no writer listens for trims"
        sock.sendall(f"TRIM {offset}{' UPLOADED' if uploaded else ''}\n".encode())
        answer = _read_line(sock)
    except OSError as exc:
        return "RETRY", f"hand-off failed: {exc}"
    finally:
        sock.close()
    kind, _, rest = answer.partition(" ")
    if kind not in ("OK", "RETRY", "ERR"):
        return "RETRY", f"unexpected answer {answer!r}"
    return kind, rest


def trim_or_hand_off(path: str, offset: int, timeout_s: float, trim_directly) -> str:
    """Trim ``path`` to ``offset``: directly when its lock is free, else by the running writer.

    ``trim_directly(path, offset)`` trims with the lock (raises RefusedError while a writer holds
    it). Retries until ``timeout_s``. Returns "direct" or "writer".

    Raises:
        TrimPendingError: neither happened within ``timeout_s``.
        UsageError: the offset is refused (not a record, behind the trim point).
    """
    from walctl.errors import RefusedError, TrimPendingError

    deadline = time.monotonic() + timeout_s
    last = "the WAL is locked by a writer"
    while True:
        try:
            trim_directly(path, offset)
            return "direct"
        except RefusedError as exc:
            last = exc.what
        kind, rest = request_trim(path, offset)
        if kind == "OK":
            return "writer"
        if kind == "ERR":
            code, _, message = rest.partition(" ")
            if code == "2":
                raise UsageError(f"the writer refused the trim: {message}", where=path)
            last = f"the writer refused the trim: {message}"
        else:
            last = rest if kind == "RETRY" else f"{last}; {rest}"
        if time.monotonic() >= deadline:
            raise TrimPendingError(f"uploaded and committed, but the WAL was not trimmed to {offset} within "
                                   f"{timeout_s:g} s ({last})", where=path,
                                   hint="the writer must run walctl with the trim hand-off; rerun upload "
                                        "(it skips what is committed), or pass --no-trim")
        time.sleep(RETRY_PAUSE_S)
