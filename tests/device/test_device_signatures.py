"""detect_signature: golden minimal images for each signature, and random data left alone."""

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walctl.device import SIGNATURE_READ_BYTES, aligned_buffer, detect_signature


def image(*writes: tuple[int, bytes], size: int = SIGNATURE_READ_BYTES) -> bytes:
    """A zeroed device head with ``bytes`` placed at each ``offset``."""
    buf = bytearray(size)
    for offset, data in writes:
        buf[offset:offset + len(data)] = data
    return bytes(buf)


def ext(compat: int = 0, incompat: int = 0, ro_compat: int = 0, log_block_size: int = 2) -> bytes:
    sb = 1024
    return image((sb + 24, struct.pack("<I", log_block_size)),
                 (sb + 56, struct.pack("<H", 0xEF53)),
                 (sb + 92, struct.pack("<III", compat, incompat, ro_compat)))


def mbr_entry(boot: int, ptype: int, start_lba: int, sectors: int) -> bytes:
    return bytes([boot, 0, 0, 0, ptype, 0, 0, 0]) + struct.pack("<II", start_lba, sectors)


BOOT_SIG = (510, b"\x55\xaa")

GOLDEN = [
    ("ext2", ext(), "ext2 filesystem"),
    ("ext3", ext(compat=0x4, incompat=0x2), "ext3 filesystem"),
    # extents | 64bit | flex_bg | filetype, as mkfs.ext4 writes them
    ("ext4", ext(compat=0x3C, incompat=0x2C2, ro_compat=0x46B), "ext4 filesystem"),
    ("ext4 ro_compat only", ext(ro_compat=0x400), "ext4 filesystem"),
    ("xfs", image((0, b"XFSB")), "XFS filesystem"),
    ("btrfs", image((65600, b"_BHRfS_M")), "btrfs filesystem"),
    ("swap v1", image((4086, b"SWAP-SPACE")), "swap space"),
    ("swap v2", image((4086, b"SWAPSPACE2")), "swap space"),
    ("swap 64k pages", image((65526, b"SWAPSPACE2")), "swap space"),
    ("lvm2 sector 0", image((0, b"LABELONE")), "LVM2 physical volume"),
    ("lvm2 sector 1", image((512, b"LABELONE"), (536, b"LVM2 001")), "LVM2 physical volume"),
    ("lvm2 sector 2", image((1024, b"LABELONE")), "LVM2 physical volume"),
    ("lvm2 sector 3", image((1536, b"LABELONE")), "LVM2 physical volume"),
    ("luks", image((0, b"LUKS\xba\xbe\x00\x02")), "LUKS encrypted volume"),
    # GPT keeps a protective MBR (type 0xEE) in sector 0: GPT must win.
    ("gpt 512", image((446, mbr_entry(0, 0xEE, 1, 0xFFFFFFFF)), BOOT_SIG, (512, b"EFI PART")),
     "GPT partition table"),
    ("gpt 4kn", image((4096, b"EFI PART")), "GPT partition table"),
    ("dos", image((446, mbr_entry(0x80, 0x83, 2048, 204800)), BOOT_SIG), "DOS partition table"),
    ("dos 4th entry", image((494, mbr_entry(0x00, 0x07, 63, 1000)), BOOT_SIG), "DOS partition table"),
    ("vfat fat32", image((3, b"mkfs.fat"), (82, b"FAT32   "), BOOT_SIG), "vfat filesystem"),
    ("vfat fat16", image((54, b"FAT16   "), BOOT_SIG), "vfat filesystem"),
    ("vfat fat12", image((54, b"FAT12   "), BOOT_SIG), "vfat filesystem"),
    ("iso9660", image((32769, b"CD001")), "iso9660 filesystem"),
    ("squashfs", image((0, b"hsqs")), "squashfs filesystem"),
    ("ntfs", image((3, b"NTFS    "), BOOT_SIG), "NTFS filesystem"),
    ("exfat", image((3, b"EXFAT   "), BOOT_SIG), "exFAT filesystem"),
]


@pytest.mark.parametrize(("buf", "expected"), [(b, e) for _, b, e in GOLDEN], ids=[n for n, _, _ in GOLDEN])
def test_golden_signatures(buf, expected):
    assert detect_signature(buf) == expected


NOT_SIGNATURES = [
    ("zeros", image()),
    ("empty", b""),
    ("short zeros", bytes(512)),
    ("ones", b"\xff" * SIGNATURE_READ_BYTES),
    # 0x55AA alone is not a partition table: every entry empty...
    ("boot sig, empty entries", image(BOOT_SIG)),
    # ...or entries that cannot be real (bad boot flag, no sectors, no start).
    ("boot sig, bad boot flag", image((446, mbr_entry(0x37, 0x83, 2048, 100)), BOOT_SIG)),
    ("boot sig, zero sectors", image((446, mbr_entry(0x80, 0x83, 2048, 0)), BOOT_SIG)),
    ("boot sig, zero start", image((446, mbr_entry(0x80, 0x83, 0, 100)), BOOT_SIG)),
    ("fat label without boot sig", image((82, b"FAT32   "))),
    ("ext magic, absurd block size", ext(log_block_size=40)),
    ("swap magic in the wrong place", image((4000, b"SWAPSPACE2"))),
    ("magic cut off by a short buffer", image((65600, b"_BHRfS_M"))[:65604]),
]


@pytest.mark.parametrize("buf", [b for _, b in NOT_SIGNATURES], ids=[n for n, _ in NOT_SIGNATURES])
def test_not_signatures(buf):
    assert detect_signature(buf) is None


def test_short_buffer_still_sees_shallow_signatures():
    assert detect_signature(b"XFSB") == "XFS filesystem"


def test_accepts_mmap_and_memoryview():
    buf = aligned_buffer(SIGNATURE_READ_BYTES)
    buf[0:4] = b"hsqs"
    assert detect_signature(buf) == "squashfs filesystem"
    with memoryview(buf) as mv:
        assert detect_signature(mv) == "squashfs filesystem"
    buf.close()


def test_read_size_covers_the_deepest_signature():
    assert SIGNATURE_READ_BYTES == 69632 and SIGNATURE_READ_BYTES % 4096 == 0
    assert SIGNATURE_READ_BYTES >= 65600 + 8


@given(st.binary(max_size=4096))
def test_random_short_bytes_never_raise(buf):
    assert detect_signature(buf) is None or isinstance(detect_signature(buf), str)


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=0, max_value=2**64))
def test_random_full_heads_never_raise(seed):
    # A seed, not the bytes themselves: 68 KiB is too large for hypothesis to draw.
    buf = random.Random(seed).randbytes(SIGNATURE_READ_BYTES)
    result = detect_signature(buf)
    assert result is None or isinstance(result, str)


def test_random_data_is_rarely_flagged():
    """A wiped-with-random or encrypted-looking device must not read as a filesystem."""
    rng = random.Random(20240601)
    flagged = [detect_signature(rng.randbytes(SIGNATURE_READ_BYTES)) for _ in range(300)]
    assert [f for f in flagged if f is not None] == []
