"""The trim mark on a real block device (a loop device, root only; detached by the fixture): a
writer's open there is refused at open() already (O_EXCL: EBUSY), before any flock, and still finds
the trim's mark, from a read-only descriptor of its own."""

import os

import pytest

from walctl.device import lock_holder, open_device
from walctl.device.locks import TrimHolder, trim_holder
from walctl.errors import RefusedError

pytestmark = pytest.mark.loop

LOOP_BYTES = 16 << 20


def test_a_writer_waits_for_a_trim_on_a_block_device(loop_device):
    path = loop_device(LOOP_BYTES)
    trim = open_device(path, writable=True, trim_mark=True)
    try:
        assert trim.is_block_device and trim_holder(path) == TrimHolder(os.getpid(), "walctl")
        with pytest.raises(RefusedError) as info:  # no wait: refused at once, the trim named
            open_device(path, writable=True)
        assert info.value.what == f"a trim by walctl (pid {os.getpid()}) holds the device"
        with open_device(path, writable=False) as reader:  # a reader's open is not held
            assert reader.size_bytes == LOOP_BYTES
        said = []

        def on_wait(message):  # the trim ends once the writer said it waits
            said.append(message)
            trim.close()

        with open_device(path, writable=True, trim_wait_s=30, on_wait=on_wait):
            assert lock_holder(path) == os.getpid() and trim_holder(path) is None
        assert said == [f"{path}: waiting up to 30 s for walctl (pid {os.getpid()}) to finish trimming"]
    finally:
        trim.close()


def test_an_unmarked_holder_of_a_block_device_is_refused_at_once(loop_device, hold_writer):
    path = loop_device(LOOP_BYTES)
    pid = hold_writer(path)
    said = []
    with pytest.raises(RefusedError) as info:
        open_device(path, writable=True, trim_wait_s=30, on_wait=said.append)
    assert info.value.what == "device is busy (mounted, or opened exclusively by another process)"
    assert info.value.hint == f"pid {pid}" and said == []
