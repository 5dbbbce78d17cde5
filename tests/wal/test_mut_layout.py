"""wal/layout.py's arithmetic (issue 32): alignment both ways, the ring of a walctl WAL and of an
AutoMQ one with a larger block size, and where an offset lands (its lap, its lap's end)."""

from __future__ import annotations

from walctl.format.header import ALIGN, HEADERS_SIZE
from walctl.wal.layout import Ring, align_down, align_up


def test_align_up_and_down_default_to_4096_and_take_another_alignment():
    assert ALIGN == 4096
    assert [align_up(n) for n in (0, 1, 4095, 4096, 4097)] == [0, 4096, 4096, 4096, 8192]
    assert [align_down(n) for n in (0, 1, 4095, 4096, 4097, 8191)] == [0, 0, 0, 4096, 4096, 4096]
    assert align_up(5, 8) == 8 and align_up(16, 8) == 16 and align_up(17, 8) == 24
    assert align_down(5, 8) == 0 and align_down(23, 8) == 16
    assert align_up(-1) == 0 and align_down(-1) == -4096


def test_a_walctl_ring_starts_after_the_two_4k_slots():
    ring = Ring(64 * 1024)
    assert ring.block_size == ALIGN
    assert ring.headers_size == HEADERS_SIZE == 8192
    assert ring.size == 64 * 1024 - 8192


def test_an_automq_ring_with_a_larger_block_starts_after_two_of_its_blocks():
    ring = Ring(1 << 20, 65536)
    assert ring.headers_size == 2 * 65536
    assert ring.size == (1 << 20) - 2 * 65536
    assert Ring(1 << 20, 8192).headers_size == 16384
    assert ring.physical(0) == 131072 and ring.physical(ring.size + 5) == 131077


def test_physical_lap_and_lap_end_of_offsets_around_a_lap_boundary():
    ring = Ring(8192 + 10000)
    size = ring.size
    assert size == 10000
    assert [ring.physical(o) for o in (0, 1, size - 1, size, size + 7, 3 * size + 2)] == \
        [8192, 8193, 8192 + size - 1, 8192, 8199, 8194]
    assert [ring.lap(o) for o in (0, size - 1, size, 2 * size - 1, 2 * size)] == [0, 0, 1, 1, 2]
    assert [ring.lap_end(o) for o in (0, size - 1, size, 2 * size + 3)] == [size, size, 2 * size, 3 * size]


def test_describe_reports_an_offset_the_way_findings_do():
    ring = Ring(8192 + 10000)
    assert ring.describe(14100) == {"offset": 14100, "physical_offset": 8192 + 4100, "lap": 1,
                                    "offset_mod_4096": 14100 % 4096}
    assert ring.describe(0) == {"offset": 0, "physical_offset": 8192, "lap": 0, "offset_mod_4096": 0}
