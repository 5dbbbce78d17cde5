"""StreamRecordBatch.decode's refusals, each with its message, field, value and position (issue 32,
mutation survivors of format/batch.py): recover, inspect and verify print them as they are."""

from __future__ import annotations

import pytest

from walctl import errors
from walctl.format.batch import StreamRecordBatch as B
from tests.format.test_format_batch import batch_bytes

INT64_LIMIT = 1 << 63


@pytest.mark.parametrize("raw, kwargs, error, field, found, position, message", [
    (batch_bytes(-1, 0, 0, 1, b""), {}, errors.BoundsError, "StreamRecordBatch streamId", -1, 1,
     "StreamRecordBatch streamId = -1 out of bounds (>= 0)"),
    (batch_bytes(1, 0, -1, 1, b""), {}, errors.BoundsError, "StreamRecordBatch baseOffset", -1, 17,
     "StreamRecordBatch baseOffset = -1 out of bounds (>= 0)"),
    (batch_bytes(1, 0, 0, 0, b""), {}, errors.BoundsError, "StreamRecordBatch count", 0, 25,
     "StreamRecordBatch count = 0 out of bounds (>= 1)"),
    (batch_bytes(1, 0, INT64_LIMIT - 3, 4, b""), {}, errors.BoundsError, "StreamRecordBatch end offset",
     INT64_LIMIT + 1, 25, f"StreamRecordBatch end offset = {INT64_LIMIT + 1} out of bounds (< 2^63)"),
    (batch_bytes(1, 0, 0, 1, b"ab", payload_length=4), {}, errors.TruncatedError, None, 2, 33,
     "StreamRecordBatch payload truncated: need 4 bytes, found 2"),
    (batch_bytes(1, 0, 0, 1, b"ab") + b"xyz", {"exact": True}, errors.BoundsError, "bytes after StreamRecordBatch",
     3, 35, "bytes after StreamRecordBatch = 3 out of bounds (0: the batch must fill the record body)"),
    (batch_bytes(1, 0, 0, 1, b"ab", magic=0x23), {}, errors.BadMagicError, None, 0x23, 0,
     "StreamRecordBatch: bad magic 0x23, expected 0x22"),
    (bytes(33), {}, errors.ZeroedError, None, None, 0, "StreamRecordBatch header is all zeros (never written or torn)"),
    (bytes(32), {}, errors.TruncatedError, None, 32, 0, "StreamRecordBatch header truncated: need 33 bytes, found 32"),
], ids=["stream", "base", "count", "end", "payload", "exact", "magic", "zeroed", "header"])
def test_refusals(raw, kwargs, error, field, found, position, message):
    with pytest.raises(errors.FormatError) as info:
        B.decode(b"q" + raw, 1, **kwargs)
    exc = info.value
    assert type(exc) is error
    assert (exc.what, getattr(exc, "field", None), exc.found, exc.offset) == (message, field, found, 1 + position)


def test_limits_and_views():
    top = B.decode(batch_bytes(INT64_LIMIT - 1, -1, INT64_LIMIT - 2, 1, b""), exact=True)
    assert (top.stream_id, top.epoch, top.end_offset, top.size) == (INT64_LIMIT - 1, -1, INT64_LIMIT - 1, 33)
    raw = batch_bytes(0, 0, 0, (1 << 32) - 1, b"xy")
    b = B.decode(raw, exact=True)
    assert (b.count, b.payload, b.size) == ((1 << 32) - 1, b"xy", 35) and type(b.payload) is bytes
    view = B.decode(raw, copy=False).payload
    assert isinstance(view, memoryview) and view.readonly and bytes(view) == b"xy"
    assert B.decode(raw + b"next", exact=False) == b  # without exact, what follows is the next batch's


def test_a_negative_position_and_a_short_buffer_say_what_they_need():
    with pytest.raises(errors.BoundsError) as info:
        B.decode(batch_bytes(1, 0, 0, 1, b""), -3)
    assert (info.value.what, info.value.offset) == ("StreamRecordBatch header: negative position -3", -3)
    with pytest.raises(errors.TruncatedError) as info:
        B.decode(bytes(20), 0)
    assert (info.value.expected, info.value.found, info.value.offset) == (33, 20, 0)
