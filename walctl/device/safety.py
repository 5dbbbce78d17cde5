"""Checks before a destructive write (init, bench): mounted, held, or holding data.

Every check takes its inputs (the mount table text, the sysfs root, the first
bytes of the device) as arguments with the real locations as defaults, so the
tests can fake them.
"""

from __future__ import annotations

import os
import re
import stat
import struct

from walctl.errors import IOFailure, NotFoundError, RefusedError, UsageError

# The deepest signature we look for is btrfs's superblock magic at 64 KiB + 64
# (8 bytes); 68 KiB is the next multiple of 4096 past it, with room to spare.
SIGNATURE_READ_BYTES = 69632

# ext2/3/4 feature bits (<linux/ext4.h>) that tell the generations apart.
_EXT3_COMPAT_HAS_JOURNAL = 0x4
_EXT3_INCOMPAT_KNOWN = 0x1F   # compression, filetype, recover, journal_dev, meta_bg
_EXT3_RO_COMPAT_KNOWN = 0x7   # sparse_super, large_file, btree_dir
_MBR_ENTRIES_OFFSET = 446     # four 16-byte partition entries, then 0x55AA at 510


def _at(buf, offset: int, magic: bytes) -> bool:
    return len(buf) >= offset + len(magic) and bytes(buf[offset:offset + len(magic)]) == magic


def _u16le(buf, offset: int) -> int | None:
    return struct.unpack_from("<H", buf, offset)[0] if len(buf) >= offset + 2 else None


def _u32le(buf, offset: int) -> int:
    return struct.unpack_from("<I", buf, offset)[0]


def _boot_signature(buf) -> bool:
    return _at(buf, 510, b"\x55\xaa")


def _ext_generation(buf) -> str | None:
    sb = 1024  # the superblock starts 1 KiB in, whatever the block size
    if _u16le(buf, sb + 56) != 0xEF53 or len(buf) < sb + 104:
        return None
    # s_log_block_size: blocks are 1 KiB << n, at most 64 KiB; guards against a
    # random 0xEF53 passing as a filesystem.
    if _u32le(buf, sb + 24) > 6:
        return None
    compat, incompat, ro_compat = struct.unpack_from("<III", buf, sb + 92)
    if incompat & ~_EXT3_INCOMPAT_KNOWN or ro_compat & ~_EXT3_RO_COMPAT_KNOWN:
        return "ext4 filesystem"
    if compat & _EXT3_COMPAT_HAS_JOURNAL:
        return "ext3 filesystem"
    return "ext2 filesystem"


def _dos_partition_table(buf) -> bool:
    """True when 0x55AA ends sector 0 and at least one partition entry looks real."""
    if not _boot_signature(buf):
        return False
    for i in range(4):
        entry = _MBR_ENTRIES_OFFSET + 16 * i
        boot_flag, part_type = buf[entry], buf[entry + 4]
        start_lba, sectors = struct.unpack_from("<II", buf, entry + 8)
        # A used entry has a type, a boot flag of 0x00/0x80 and a non-empty extent;
        # random bytes rarely meet all three, and boot code that only ends in 0x55AA
        # (a FAT or NTFS boot sector) is caught by the earlier checks.
        if part_type != 0 and boot_flag in (0x00, 0x80) and sectors > 0 and start_lba > 0:
            return True
    return False


def detect_signature(buf: bytes) -> str | None:
    """Name the filesystem, volume or partition table whose signature starts ``buf``.

    Args:
        buf: the first bytes of a device (SIGNATURE_READ_BYTES of them to see all
            signatures; a shorter buffer just skips the deeper ones).
    Returns:
        A short name such as "ext4 filesystem" or "GPT partition table", or None.
    """
    if not isinstance(buf, (bytes, bytearray)):
        buf = bytes(buf)  # mmap or memoryview: at most 68 KiB, copying is cheap
    for name, found in _SIGNATURES:
        if found(buf):
            return name if isinstance(name, str) else name(buf)
    return None


# The signatures detect_signature knows, in the order it checks them: (name, test); a name that
# is a function names what the test found (ext2/3/4).
_SIGNATURES = (
    ("LUKS encrypted volume", lambda buf: _at(buf, 0, b"LUKS\xba\xbe")),
    ("XFS filesystem", lambda buf: _at(buf, 0, b"XFSB")),
    ("squashfs filesystem", lambda buf: _at(buf, 0, b"hsqs")),
    # GPT's header sits in LBA 1: byte 512 on 512-byte-sector disks, 4096 on 4Kn.
    ("GPT partition table", lambda buf: _at(buf, 512, b"EFI PART") or _at(buf, 4096, b"EFI PART")),
    # LVM2 writes its label into one of the first four sectors.
    ("LVM2 physical volume", lambda buf: any(_at(buf, sector * 512, b"LABELONE") for sector in range(4))),
    (lambda buf: _ext_generation(buf), lambda buf: bool(_ext_generation(buf))),
    ("btrfs filesystem", lambda buf: _at(buf, 65600, b"_BHRfS_M")),
    # The swap signature ends the first page: 4096 - 10, or 65536 - 10 on 64 KiB pages.
    ("swap space", lambda buf: any(_at(buf, page - 10, b"SWAPSPACE2") or _at(buf, page - 10, b"SWAP-SPACE")
                                   for page in (4096, 65536))),
    ("iso9660 filesystem", lambda buf: _at(buf, 32769, b"CD001")),
    ("NTFS filesystem", lambda buf: _at(buf, 3, b"NTFS    ") and _boot_signature(buf)),
    ("exFAT filesystem", lambda buf: _at(buf, 3, b"EXFAT   ") and _boot_signature(buf)),
    ("vfat filesystem", lambda buf: _boot_signature(buf) and (_at(buf, 82, b"FAT32   ") or _at(buf, 54, b"FAT12   ")
                                                              or _at(buf, 54, b"FAT16   "))),
    ("DOS partition table", lambda buf: _dos_partition_table(buf)),
)


_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


def _unescape(field: str) -> str:
    # The kernel escapes space, tab, newline and backslash in mount fields as \ooo.
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def mount_points(device_path: str, device_rdev: int | None, mounts_text: str) -> list[str]:
    """Return where the device is mounted, from /proc/self/mounts text.

    A mount matches when its source resolves to the same path as the device, or
    (when the source exists) is a block device with the same st_rdev: /dev/root,
    /dev/disk/by-uuid/... and /dev/mapper names all reach the same device.

    Args:
        device_rdev: the device's st_rdev; None or 0 to match by path only.
    """
    target = os.path.realpath(device_path)
    found = []
    for line in mounts_text.splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue
        source, mount_point = _unescape(fields[0]), _unescape(fields[1])
        if not source.startswith("/"):
            continue  # proc, tmpfs, overlay...: not a device path
        if os.path.realpath(source) == target:
            found.append(mount_point)
            continue
        if device_rdev:
            try:
                st = os.stat(source)
            except OSError:
                continue
            if stat.S_ISBLK(st.st_mode) and st.st_rdev == device_rdev:
                found.append(mount_point)
    return found


def holders(major: int, minor: int, sys_root: str = "/sys") -> list[str]:
    """Return what sits on top of a block device: dm/md/bcache holders and partitions.

    Both come from sysfs: ``/sys/dev/block/MAJ:MIN/holders/<name>`` and, for a
    whole disk, child directories that contain a ``partition`` file.
    """
    base = os.path.join(sys_root, "dev", "block", f"{major}:{minor}")
    found = []
    try:
        found.extend(sorted(os.listdir(os.path.join(base, "holders"))))
    except OSError:
        pass
    try:
        children = sorted(os.listdir(base))
    except OSError:
        children = []
    for name in children:
        if os.path.isfile(os.path.join(base, name, "partition")):
            found.append(name)
    return found


def _read_head(path: str) -> bytes:
    """Read up to SIGNATURE_READ_BYTES from the start of ``path`` (less if it is shorter)."""
    chunks = []
    remaining = SIGNATURE_READ_BYTES
    try:
        with open(path, "rb", buffering=0) as f:
            while remaining > 0:
                chunk = f.read(remaining)
                if not chunk:
                    break
                chunks.append(chunk)
                remaining -= len(chunk)
    except OSError as exc:
        err = IOFailure(f"cannot read the first bytes: {exc.strerror}", where=path)
        err.errno = exc.errno
        raise err from exc
    return b"".join(chunks)


# Filesystems that live in memory: a WAL file there is lost on reboot or power loss.
MEMORY_FILESYSTEMS = ("tmpfs", "ramfs", "devtmpfs")


def _unescape_mount(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def filesystem_of(path: str, mounts_text: str) -> str | None:
    """The type of the filesystem ``path`` (an existing directory) is on: the longest mount point
    of the mount table that contains it."""
    real = os.path.realpath(path)
    best, best_type = "", None
    for line in mounts_text.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        mount_point = _unescape_mount(parts[1])
        inside = real == mount_point or real.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best):
            best, best_type = mount_point, parts[2]
    return best_type


def refuse_under_dev(path: str, *, mounts_path: str = "/proc/self/mounts") -> str | None:
    """Refuse a new file at ``path`` under /dev (NotFoundError): a missing device there is a typo or
    a disk this machine lacks, and the file would live in RAM (devtmpfs). Returns the filesystem
    type of its directory (None without a mount table)."""
    real = os.path.realpath(path)
    parent = os.path.dirname(real) or "."
    try:
        with open(mounts_path, encoding="utf-8", errors="surrogateescape") as f:
            fstype = filesystem_of(parent, f.read())
    except OSError:
        fstype = None  # no mount table (not Linux): only the /dev rule applies
    if (real == "/dev" or real.startswith("/dev/")) and fstype in (None, "devtmpfs"):
        raise NotFoundError("no such device", where=path,
                            hint="walctl never creates a file under /dev, which lives in RAM; check the "
                                 "device name with lsblk, or give a path on a disk")
    return fstype


def check_safe_to_create(path: str, *, force: bool, mounts_path: str = "/proc/self/mounts") -> list[str]:
    """Decide whether a new WAL file may be created at ``path`` (which does not exist).

    A path under /dev names a device that is not there (a typo, or a disk this machine lacks):
    a file created there lives in RAM (devtmpfs), so it is always refused. Any other memory
    filesystem (tmpfs, ramfs) is refused unless ``force``: appends there are not durable.

    Returns:
        Warnings for the CLI to print (a memory filesystem accepted with force).
    Raises:
        NotFoundError: the path is under /dev.
        RefusedError: on tmpfs/ramfs without ``force``.
    """
    fstype = refuse_under_dev(path, mounts_path=mounts_path)
    if fstype in MEMORY_FILESYSTEMS:
        if not force:
            raise RefusedError(f"{fstype} is memory, not a disk: a WAL there loses every record on reboot",
                               where=path, hint="give a path on a disk, or --force for a throwaway WAL")
        return [f"{path}: creating a WAL on {fstype} (--force): its records do not survive a reboot"]
    return []


def check_safe_to_overwrite(path: str, *, force: bool, mounts_path: str = "/proc/self/mounts",
                            sys_root: str = "/sys", read_head: bytes | None = None) -> list[str]:
    """Decide whether ``path`` may be overwritten; return warnings or raise.

    Args:
        force: turn a filesystem/partition signature from a refusal into a warning.
            It never overrides mounted or held: those are in use right now.
        mounts_path: the mount table to read (block devices only).
        sys_root: where sysfs is (block devices only).
        read_head: the first bytes of the device; read from ``path`` when None.
    Returns:
        Warnings for the CLI to print (e.g. the signature overridden by force).
    Raises:
        NotFoundError: no such path.
        UsageError: neither a block device nor a regular file.
        RefusedError: mounted, held by dm/md/bcache or partitioned, or holding a
            signature without ``force``.
        IOFailure: the mount table or the device could not be read.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError as exc:
        raise NotFoundError("no such device or file", where=path,
                            hint="check the path; DEVICE is the first argument") from exc
    except OSError as exc:
        err = IOFailure(f"cannot stat: {exc.strerror}", where=path)
        err.errno = exc.errno
        raise err from exc

    if stat.S_ISBLK(st.st_mode):
        try:
            with open(mounts_path, encoding="utf-8", errors="surrogateescape") as f:
                mounts_text = f.read()
        except OSError as exc:
            # Without the mount table we cannot prove the device is unused: do not guess.
            err = IOFailure(f"cannot read the mount table: {exc.strerror}", where=mounts_path)
            err.errno = exc.errno
            raise err from exc
        mounted_on = mount_points(path, st.st_rdev, mounts_text)
        if mounted_on:
            raise RefusedError(f"device is mounted on {', '.join(mounted_on)}", where=path,
                               hint="unmount it first")
        held_by = holders(os.major(st.st_rdev), os.minor(st.st_rdev), sys_root)
        if held_by:
            raise RefusedError(f"device is in use by {', '.join(held_by)}", where=path,
                               hint="it has partitions or dm/md/bcache devices on top; remove them first")
    elif stat.S_ISDIR(st.st_mode):
        raise UsageError("is a directory, not a device or file", where=path,
                         hint="name a block device or a WAL file")
    elif not stat.S_ISREG(st.st_mode):
        raise UsageError("not a block device or regular file", where=path,
                         hint="name a block device or a WAL file")

    head = read_head if read_head is not None else _read_head(path)
    signature = detect_signature(head)
    if signature is None:
        return []
    if not force:
        raise RefusedError(f"{signature} signature found", where=path,
                           hint="overwrite it with --force")
    return [f"{path}: overwriting a {signature} signature (--force)"]
