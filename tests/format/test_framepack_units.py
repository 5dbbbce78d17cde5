"""walctl.format.framepack's Python side (issue 32, framepack.py's survivors): hex_lines and
base64_lines with ``stop`` 0 and a first/stop window, in C and in the twin, and which
implementation answers when the extension lacks a function (an older build) or is missing."""

from __future__ import annotations

import base64
import struct
from types import SimpleNamespace

import pytest

from walctl.format import framepack

PAYLOADS = [b"ab", b"\x00\xff", b"hello", b""]


def spans_of(payloads) -> tuple[bytes, bytes]:
    buf, flat = b"".join(payloads), []
    pos = 0
    for p in payloads:
        flat += [pos, len(p)]
        pos += len(p)
    return buf, struct.pack(f"={len(flat)}q", *flat)


def implementations():
    """The C extension when built, then the pure-Python twin."""
    return ([framepack._native] if framepack._native is not None else []) + [None]


def hex_of(ps) -> bytes:
    return b"".join(p.hex().encode() + b"\n" for p in ps)


def b64_of(ps) -> bytes:
    return b"".join(base64.b64encode(p) + b"\n" for p in ps)


@pytest.mark.parametrize("first, stop, want", [(0, 0, []), (1, 1, []), (0, 1, PAYLOADS[:1]), (1, 3, PAYLOADS[1:3]),
                                               (2, -1, PAYLOADS[2:]), (0, -1, PAYLOADS)])
def test_lines_of_a_window_of_spans(monkeypatch, first, stop, want):
    buf, spans = spans_of(PAYLOADS)
    for native in implementations():
        monkeypatch.setattr(framepack, "_native", native)
        assert framepack.hex_lines(buf, spans, first, stop) == hex_of(want)
        assert framepack.base64_lines(buf, spans, first, stop) == b64_of(want)


def test_an_extension_without_the_function_leaves_it_to_the_twin(monkeypatch):
    buf, spans = spans_of(PAYLOADS)
    monkeypatch.setattr(framepack, "_native", SimpleNamespace())  # an older build: none of the three
    assert framepack.hex_lines(buf, spans) == hex_of(PAYLOADS)
    assert framepack.base64_lines(buf, spans, 1, 2) == b64_of(PAYLOADS[1:2])
    assert framepack.record_lines(buf, b"", 0, 0, "hex") is None
    monkeypatch.setattr(framepack, "_native", None)
    assert framepack.record_lines(buf, b"", 0, 0, "hex") is None


def test_the_extension_s_functions_answer_when_there(monkeypatch):
    calls = []

    def recorder(name):
        def fn(*args):
            calls.append((name, args[2:]))
            return name.encode()
        return fn

    fake = SimpleNamespace(hex_lines=recorder("hex"), base64_lines=recorder("b64"), record_lines=recorder("rec"))
    monkeypatch.setattr(framepack, "_native", fake)
    buf, spans = spans_of(PAYLOADS)
    assert framepack.hex_lines(buf, spans) == b"hex"
    assert framepack.hex_lines(buf, spans, 1, 2) == b"hex"
    assert framepack.base64_lines(buf, spans) == b"b64"
    assert framepack.base64_lines(buf, spans, 2, 0) == b"b64"
    assert framepack.record_lines(buf, b"", 0, 0, "text") == b"rec"
    assert calls == [("hex", (0, 1 << 62)), ("hex", (1, 2)), ("b64", (0, 1 << 62)), ("b64", (2, 0)),
                     ("rec", (0, 0, framepack.RECORD_LINE_MODES["text"]))]
