"""walctl.format.framepack (issue 31): frame_pack must write, byte for byte, what the bulk path
writes for the same input (split_* then pack_records with a batch), render the acknowledgement
lines the append command renders, and stop where it says; hex_lines/base64_lines must equal
bytes.hex() and base64.b64encode() per payload, in C and in the pure-Python twin."""

from __future__ import annotations

import base64
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walctl.format import bulk, framepack

pytestmark = pytest.mark.skipif(not framepack.AVAILABLE, reason="walctl.format._native is not built here")

payloads_st = st.lists(st.binary(min_size=0, max_size=300), min_size=0, max_size=40)


def bulk_path(data: bytes, lines: bool, limit: int, offset: int, batch) -> tuple[int, bytes, int]:
    """(records, packed bytes, input bytes used) the way append packed before frame_pack."""
    spans = (bulk.split_lines if lines else bulk.split_length_prefixed)(data, 0)
    flat = list(spans.spans[:2 * spans.count])
    bodies = [data[p:p + n] for p, n in zip(flat[0::2], flat[1::2])]
    out = bytearray(limit)
    count, pos = bulk.pack_records(out, 0, limit, offset, bodies, batch=batch)
    used = (flat[2 * count - 2] + flat[2 * count - 1] + (1 if lines else 0)) if count else 0
    return count, bytes(out[:pos]), used


def frame(payloads, lines: bool) -> bytes:
    if lines:
        return b"".join(p + b"\n" for p in payloads)
    return b"".join(len(p).to_bytes(4, "big") + p for p in payloads)


@settings(max_examples=150, deadline=None)
@given(payloads=payloads_st, lines=st.booleans(), limit=st.integers(0, 8000), offset=st.integers(0, 1 << 40),
       base=st.integers(0, 1 << 40), cut=st.integers(0, 64))
def test_frame_pack_writes_what_split_and_pack_records_write(payloads, lines, limit, offset, base, cut):
    if lines:
        payloads = [p.replace(b"\n", b"") for p in payloads]
    data = frame(payloads, lines) + bytes(range(cut % 3))  # an incomplete record may follow
    if lines:
        data = data.rstrip(b"\x00\x01") if not data.endswith(b"\n") else data
    batch = (7, 3, base)
    count, packed, used = bulk_path(data, lines, limit, offset, batch)
    out = bytearray(limit)
    got = framepack.frame_pack(out, 0, limit, offset, data, 0, len(data), lines, 7, 3, base, -1, 1 << 40, 2)
    n, pos, src_pos, payload_bytes, last, acks, stop, next_len = got
    assert (n, bytes(out[:pos]), src_pos) == (count, packed, used)
    assert payload_bytes == sum(map(len, payloads[:n]))
    sizes = [24 + 33 + len(p) for p in payloads[:n]]
    offsets = [offset + sum(sizes[:i]) for i in range(n)]
    assert last == (offsets[-1] if n else -1)
    expected = "".join(f'{{"type":"record","offset":{o},"stream_id":7,"base_offset":{base + i},"count":1,'
                       f'"payload_bytes":{len(payloads[i])},"wal_offset":{o},"stream_offset":{base + i}}}\n'
                       for i, o in enumerate(offsets))
    assert acks.decode() == expected
    if n < len(payloads):
        assert stop == framepack.STOP_FULL and next_len == len(payloads[n])
    else:
        assert stop == framepack.STOP_INPUT
    plain = framepack.frame_pack(bytearray(limit), 0, limit, offset, data, 0, len(data), lines, 7, 3, base, -1,
                                 1 << 40, 1)[5]
    assert plain.decode() == "".join(f"{o}\n" for o in offsets)


def test_frame_pack_continues_from_a_position_and_honours_max_records_and_max_payload():
    data = frame([b"a", b"bb", b"ccc", b"dddd"], False)
    out = bytearray(4096)
    n, pos, src, *_ = framepack.frame_pack(out, 100, 4096, 5000, data, 5, len(data), False, 1, 0, 0, 2, 1 << 20, 0)
    assert (n, pos, src) == (2, 100 + 2 * 57 + 5, 5 + 6 + 7)
    first = bulk.pack_records(bytearray(4096), 0, 4096, 5000, [b"bb", b"ccc"], batch=(1, 0, 0))
    assert first[0] == 2
    res = framepack.frame_pack(bytearray(4096), 0, 4096, 0, data, 0, len(data), False, 1, 0, 0, -1, 2, 0)
    assert res[0] == 2 and res[6] == framepack.STOP_TOO_LARGE and res[7] == 3


def spans_of(payloads) -> tuple[bytes, bytes]:
    buf = b"".join(payloads)
    flat, pos = [], 0
    for p in payloads:
        flat += [pos, len(p)]
        pos += len(p)
    return buf, struct.pack(f"={len(flat)}q", *flat)


@settings(max_examples=60, deadline=None)
@given(payloads=payloads_st)
def test_hex_and_base64_lines_are_hex_and_b64encode_of_each_payload(payloads):
    buf, spans = spans_of(payloads)
    saved = framepack._native
    try:
        for native in (saved, None):  # C, then the pure-Python twin
            framepack._native = native
            assert framepack.hex_lines(buf, spans) == b"".join(p.hex().encode() + b"\n" for p in payloads)
            assert framepack.base64_lines(buf, spans) == b"".join(base64.b64encode(p) + b"\n" for p in payloads)
            if len(payloads) > 2:
                assert framepack.hex_lines(buf, spans, 1, 2) == payloads[1].hex().encode() + b"\n"
    finally:
        framepack._native = saved


def test_a_span_outside_the_buffer_is_a_value_error():
    with pytest.raises(ValueError):
        framepack.hex_lines(b"abc", struct.pack("=2q", 2, 5))


TRICKY = [b"", b"plain", b'q"uote\\back', b"\x00\x01\x1f\x7f\n\r\t\x08\x0c", "caf\u00e9 \u20ac \U0001F600".encode(),
          b"\xff\xfe", b"\xe2\x82", b"\xe2\x82A", b"\xed\xa0\x80", b"\xc0\x80", b"\xf4\x90\x80\x80", b"\xf0\x9f\x98",
          b"\x80abc", b"\xe0\x80\xaf", "\u2028\ufeff".encode()]


def rows_for(payloads) -> tuple[bytes, bytes]:
    """A buffer of StreamRecordBatch bodies and decode_records-like rows for them (ROW int64 each)."""
    buf, rows = bytearray(), []
    for i, p in enumerate(payloads):
        pos = len(buf)
        buf += bytes(33) + p
        rows += [1000 + 100 * i, pos, 33 + len(p), bulk.KIND_BATCH, 9, 0, 50 + i, 1]
    return bytes(buf), struct.pack(f"={len(rows)}q", *rows)


def python_lines(payloads, how: str) -> bytes:
    import json

    def text(p: bytes) -> str:
        if how == "hex":
            return p.hex()
        if how == "base64":
            return base64.b64encode(p).decode()
        return p.decode("utf-8", errors="backslashreplace")

    return "".join(json.dumps({"type": "record", "offset": 1000 + 100 * i, "stream_id": 9, "base_offset": 50 + i,
                               "count": 1, "payload_bytes": len(p), "wal_offset": 1000 + 100 * i,
                               "stream_offset": 50 + i, "payload": text(p)}, separators=(",", ":")) + "\n"
                   for i, p in enumerate(payloads)).encode()


@pytest.mark.parametrize("how", ["hex", "base64", "text"])
def test_record_lines_are_recovers_json_dumps_lines_for_tricky_payloads(how):
    buf, rows = rows_for(TRICKY)
    assert framepack.record_lines(buf, rows, 0, len(TRICKY), how) == python_lines(TRICKY, how)


@settings(max_examples=200, deadline=None)
@given(payloads=st.lists(st.one_of(st.binary(max_size=60), st.text(max_size=30).map(
    lambda s: s.encode("utf-8", "surrogatepass"))), max_size=12))
def test_record_lines_text_is_json_dumps_of_backslashreplace(payloads):
    buf, rows = rows_for(payloads)
    for how in ("text", "hex", "base64"):
        assert framepack.record_lines(buf, rows, 0, len(payloads), how) == python_lines(payloads, how)


EDGES = sorted({0, 1, 9, 10, 11, 99, 100, 101, 999, 1000} | {10 ** k + d for k in range(2, 19) for d in (-1, 0, 1)}
               | {(1 << 62) - 1, 1 << 62})


@pytest.mark.parametrize("render", [1, 2])
def test_acknowledgement_numbers_at_every_digit_count(render):
    """The ack lines' numbers (two digits per division, each converted once: issue 31) at each
    count of digits, 1 to 19, and around every power of ten: str(n) of each."""
    payloads = [b"x" * n for n in (0, 9, 10, 99, 100, 999, 1000, 10000)]
    data = frame(payloads, False)
    for v in EDGES:
        for sid, offset, base in ((v, v, v), (v, 7, 0), (3, v, (1 << 63) - 1 - len(payloads) if v > 10 ** 17 else v)):
            out = bytearray(60000)
            got = framepack.frame_pack(out, 0, len(out), offset, data, 0, len(data), False, sid, 1, base, -1,
                                       1 << 20, render)
            assert got[0] == len(payloads)
            sizes = [24 + 33 + len(p) for p in payloads]
            offsets = [offset + sum(sizes[:i]) for i in range(len(payloads))]
            if render == 1:
                expected = "".join(f"{o}\n" for o in offsets)
            else:
                expected = "".join(f'{{"type":"record","offset":{o},"stream_id":{sid},"base_offset":{base + i},'
                                   f'"count":1,"payload_bytes":{len(payloads[i])},"wal_offset":{o},'
                                   f'"stream_offset":{base + i}}}\n' for i, o in enumerate(offsets))
            assert got[5].decode() == expected, (v, sid, offset, base)
