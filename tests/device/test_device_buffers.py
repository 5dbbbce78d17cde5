"""Aligned buffers and the alignment rules."""

import mmap

import pytest

from walctl.device import ALIGN, align_down, align_up, aligned_buffer, buffer_address, check_aligned, check_buffer


@pytest.mark.parametrize("size", [4096, 8192, 1 << 20])
def test_aligned_buffer_is_page_aligned_and_zeroed(size):
    buf = aligned_buffer(size)
    assert isinstance(buf, mmap.mmap)
    assert len(buf) == size
    assert buffer_address(buf) % ALIGN == 0
    assert buf[:] == bytes(size)
    buf.close()


@pytest.mark.parametrize("size", [0, -4096, 1, 4095, 4097, 4096.0, "4096"])
def test_aligned_buffer_rejects_bad_sizes(size):
    with pytest.raises(ValueError, match="multiple of 4096"):
        aligned_buffer(size)


@pytest.mark.parametrize(("n", "up", "down"), [
    (0, 0, 0), (1, 4096, 0), (4095, 4096, 0), (4096, 4096, 4096), (4097, 8192, 4096),
])
def test_align_up_and_down(n, up, down):
    assert align_up(n) == up
    assert align_down(n) == down


def test_align_with_other_unit():
    assert align_up(513, 512) == 1024
    assert align_down(1023, 512) == 512


@pytest.mark.parametrize(("offset", "length"), [(0, 4096), (4096, 8192), (1 << 40, 1 << 20)])
def test_check_aligned_accepts(offset, length):
    check_aligned(offset, length)


@pytest.mark.parametrize(("offset", "length", "named"), [
    (1, 4096, "offset.*1"),
    (512, 4096, "offset.*512"),
    (-4096, 4096, "offset.*-4096"),
    (0, 0, "length.*0"),
    (0, 512, "length.*512"),
    (4096, 4097, "length.*4097"),
])
def test_check_aligned_names_the_bad_value(offset, length, named):
    with pytest.raises(ValueError, match=named):
        check_aligned(offset, length)


def test_check_buffer_accepts_mmap_and_aligned_slices():
    buf = aligned_buffer(3 * ALIGN)
    with check_buffer(buf) as mv:
        assert mv.nbytes == 3 * ALIGN
    with memoryview(buf) as whole, check_buffer(whole[ALIGN:3 * ALIGN]) as mv:
        assert mv.nbytes == 2 * ALIGN
    buf.close()  # every view was released, or this would raise BufferError


def test_check_buffer_rejects_misaligned_address():
    buf = aligned_buffer(2 * ALIGN)
    with memoryview(buf) as whole:
        with pytest.raises(ValueError, match="address"):
            check_buffer(whole[512:512 + ALIGN])
    # Read-only buffers (bytes) are checked too: pick a slice 512 bytes past a page.
    data = bytes(3 * ALIGN)
    start = (512 - buffer_address(data)) % ALIGN
    with memoryview(data) as view, pytest.raises(ValueError, match="address"):
        check_buffer(view[start:start + ALIGN])
    buf.close()


def test_check_buffer_rejects_bad_length_and_shape():
    buf = aligned_buffer(2 * ALIGN)
    with memoryview(buf) as whole:
        with pytest.raises(ValueError, match="length.*512"):
            check_buffer(whole[:512])
        with pytest.raises(ValueError, match="contiguous"):
            check_buffer(whole[::2])
    with pytest.raises(ValueError, match="not a buffer"):
        check_buffer(12)
    buf.close()
