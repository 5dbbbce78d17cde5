"""crc32c_unshift: the inverse of shifting a crc by zero bytes (what split derives run crcs with)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walctl.format.crc import crc32c, crc32c_combine, crc32c_unshift


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 2**40))
def test_unshift_undoes_a_shift_by_zero_bytes(crc, length):
    assert crc32c_unshift(crc32c_combine(crc, 0, length), length) == crc


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=64), st.binary(max_size=64))
def test_unshift_recovers_the_crc_of_the_front_from_the_whole(a, b):
    # crc(a + b) = shift(crc(a), len(b)) ^ crc(b); unshift turns it back into crc(a)
    assert crc32c_unshift(crc32c(a + b) ^ crc32c(b), len(b)) == crc32c(a)


@pytest.mark.parametrize("length", [0, 1, 2, 3, 7, 8, 255, 256, 4096, 1 << 29, 1 << 32])
def test_unshift_at_exact_lengths(length):
    assert crc32c_unshift(0x1234ABCD, 0) == 0x1234ABCD
    shifted = crc32c_combine(0xDEADBEEF, 0, length)
    assert crc32c_unshift(shifted, length) == 0xDEADBEEF
    if length:
        assert crc32c_unshift(shifted, length - 1) != 0xDEADBEEF


def test_unshift_of_zero_is_zero_and_negative_lengths_are_refused():
    assert crc32c_unshift(0, 12345) == 0
    with pytest.raises(ValueError, match="length must be >= 0"):
        crc32c_unshift(1, -1)
