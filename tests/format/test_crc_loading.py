"""walctl.format.crc's loading and its pure-Python combine's refusals (issue 32, mutation survivors).

crc32c comes from the crc32c package's C extension, loaded without the package's __init__ (which
imports importlib.metadata, a good part of a short command's start-up)."""

from __future__ import annotations

import sys

import crc32c as crc32c_package
import pytest

from walctl.format import crc


def test_the_extension_is_loaded_alone_and_shared(monkeypatch):
    monkeypatch.delitem(sys.modules, "crc32c._crc32c", raising=False)
    module = crc._crc32c_extension()
    assert module.__name__ == "crc32c._crc32c" and module is not crc32c_package
    assert sys.modules["crc32c._crc32c"] is module  # what ``import crc32c`` would load, loaded once
    assert module.crc32c(b"123456789") == 0xE3069283 == crc32c_package.crc32c(b"123456789")
    assert crc._crc32c_extension() is module
    sentinel = object()
    monkeypatch.setitem(sys.modules, "crc32c._crc32c", sentinel)
    assert crc._crc32c_extension() is sentinel


def test_crc32c_continues_an_earlier_value():
    assert crc.crc32c(b"6789", crc.crc32c(b"12345")) == crc.crc32c(b"123456789") == 0xE3069283


def test_combine_refuses_a_negative_length_and_takes_zero():
    with pytest.raises(ValueError) as info:
        crc._crc32c_combine_py(1, 2, -1)
    assert str(info.value) == "length must be >= 0, got -1"
    a = crc.crc32c(b"abc")
    assert crc._crc32c_combine_py(a, 0, 0) == a == crc.crc32c_combine(a, 0, 0)
    assert crc._crc32c_combine_py(0, a, 3) == a


def test_the_x2n_table_is_the_powers_of_x():
    # x^(2^k) for k = 0..66, each the square of the one before; x^1 in reflected order is 1 << 30
    table = crc._x2n_table()
    assert table == crc._X2N and len(table) == 67 and table[0] == 1 << 30
    assert table[1] == 1 << 29 and table[4] == 1 << (31 - 16)  # x^2, x^16: no reduction yet
    assert all(table[k + 1] == crc._multmodp(table[k], table[k]) for k in range(66))
    assert crc._x8nmodp(0) == 1 << 31  # x^0
    assert crc._x8nmodp(1) == crc._X2N[3]  # x^8


def test_the_first_combine_picks_its_implementation_and_keeps_it(monkeypatch):
    monkeypatch.setattr(crc, "_combine", None)
    assert crc.crc32c_combine(crc.crc32c(b"ab"), crc.crc32c(b"c"), 1) == crc.crc32c(b"abc")
    chosen = crc._combine
    assert chosen is not None and crc._combine_impl() is chosen
    assert crc.crc32c_combine(crc.crc32c(b""), crc.crc32c(b"abc"), 3) == crc.crc32c(b"abc")
