"""Mount table, sysfs holders and check_safe_to_overwrite, on a fake filesystem (pyfakefs)."""

import os
import stat

import pytest

from walctl.device import check_safe_to_overwrite, holders, mount_points
from walctl.errors import IOFailure, NotFoundError, RefusedError, UsageError

EXT4_HEAD = bytearray(4096)
EXT4_HEAD[1080:1082] = b"\x53\xef"
EXT4_HEAD[1120:1124] = (0x2C2).to_bytes(4, "little")
EXT4_HEAD = bytes(EXT4_HEAD)

MOUNTS = """\
/dev/vda / ext4 rw,relatime 0 0
proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0
tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0
/dev/loop0 /mnt/a ext4 rw,relatime 0 0
/dev/disk/by-uuid/1234 /mnt/with\\040space xfs rw 0 0
/dev/root /srv ext4 rw 0 0
/dev/disk/by-label/my\\040disk /mnt/label vfat rw 0 0
"""


def make_block_device(fs, path: str, major: int, minor: int, contents: bytes = b""):
    """A fake block device node; pyfakefs has no st_rdev of its own, so set it."""
    node = fs.create_file(path, st_mode=stat.S_IFBLK | 0o660, contents=contents)
    node.stat_result.st_rdev = os.makedev(major, minor)
    return node


@pytest.fixture
def devices(fs):
    make_block_device(fs, "/dev/loop0", 7, 0)
    make_block_device(fs, "/dev/loop1", 7, 1)
    make_block_device(fs, "/dev/loop2", 7, 2)
    make_block_device(fs, "/dev/loop3", 7, 3)
    make_block_device(fs, "/dev/loop4", 7, 4)
    fs.create_symlink("/dev/disk/by-uuid/1234", "/dev/loop1")
    fs.create_symlink("/dev/disk/by-label/my disk", "/dev/loop4")
    # /dev/root is another node for loop2: only st_rdev shows it is the same device.
    make_block_device(fs, "/dev/root", 7, 2)
    fs.create_file("/proc/self/mounts", contents=MOUNTS)
    return fs


# --- mount_points --------------------------------------------------------------

@pytest.mark.parametrize(("device", "minor", "expected"), [
    ("/dev/loop0", 0, ["/mnt/a"]),              # same path
    ("/dev/loop1", 1, ["/mnt/with space"]),     # source is a symlink to it; \040 unescaped
    ("/dev/loop2", 2, ["/srv"]),                # another node with the same st_rdev
    ("/dev/loop3", 3, []),                      # not mounted
    ("/dev/loop4", 4, ["/mnt/label"]),          # escaped source path
])
def test_mount_points(devices, device, minor, expected):
    assert mount_points(device, os.makedev(7, minor), MOUNTS) == expected


def test_mount_points_by_path_only_without_rdev(devices):
    assert mount_points("/dev/loop2", None, MOUNTS) == []
    assert mount_points("/dev/loop0", None, MOUNTS) == ["/mnt/a"]


def test_mount_points_ignores_junk_lines(devices):
    assert mount_points("/dev/loop0", os.makedev(7, 0), "\n\nbroken\n/dev/gone /x ext4 rw 0 0\n") == []


# --- holders -------------------------------------------------------------------

@pytest.fixture
def sysfs(fs):
    fs.create_dir("/sys/dev/block/7:0/holders/dm-0")
    fs.create_dir("/sys/dev/block/7:0/queue")
    fs.create_dir("/sys/dev/block/8:0/holders")
    fs.create_file("/sys/dev/block/8:0/sda1/partition", contents="1\n")
    fs.create_file("/sys/dev/block/8:0/sda2/partition", contents="2\n")
    fs.create_dir("/sys/dev/block/8:0/queue")       # a directory, but not a partition
    fs.create_file("/sys/dev/block/8:0/size", contents="2048\n")
    fs.create_dir("/sys/dev/block/9:0/holders/md0")
    fs.create_file("/sys/dev/block/9:0/p1/partition", contents="1\n")
    fs.create_dir("/sys/dev/block/7:1/holders")
    return fs


@pytest.mark.parametrize(("major", "minor", "expected"), [
    (7, 0, ["dm-0"]),
    (8, 0, ["sda1", "sda2"]),
    (9, 0, ["md0", "p1"]),
    (7, 1, []),
    (7, 7, []),   # no such device in sysfs
])
def test_holders(sysfs, major, minor, expected):
    assert holders(major, minor) == expected


def test_holders_other_sys_root(fs):
    fs.create_dir("/fake/sys/dev/block/7:0/holders/bcache0")
    assert holders(7, 0, sys_root="/fake/sys") == ["bcache0"]
    assert holders(7, 0) == []


# --- check_safe_to_overwrite ---------------------------------------------------

@pytest.mark.parametrize("force", [False, True])
def test_mounted_device_is_refused_even_with_force(devices, force):
    with pytest.raises(RefusedError) as info:
        check_safe_to_overwrite("/dev/loop0", force=force)
    assert info.value.hint == "unmount it first"
    assert "mounted on /mnt/a" in info.value.what
    assert info.value.where == "/dev/loop0"
    assert info.value.exit_code == 5


@pytest.mark.parametrize("force", [False, True])
def test_held_device_is_refused_even_with_force(devices, force):
    devices.create_dir("/sys/dev/block/7:3/holders/dm-0")
    with pytest.raises(RefusedError, match="in use by dm-0"):
        check_safe_to_overwrite("/dev/loop3", force=force)


def test_partitioned_device_is_refused(devices):
    devices.create_file("/sys/dev/block/7:3/loop3p1/partition", contents="1\n")
    with pytest.raises(RefusedError, match="loop3p1"):
        check_safe_to_overwrite("/dev/loop3", force=True)


def test_signature_needs_force(devices):
    with pytest.raises(RefusedError) as info:
        check_safe_to_overwrite("/dev/loop3", force=False, read_head=EXT4_HEAD)
    assert info.value.line() == ("walctl: error: ext4 filesystem signature found, /dev/loop3 "
                                 "(overwrite it with --force)")
    warnings = check_safe_to_overwrite("/dev/loop3", force=True, read_head=EXT4_HEAD)
    assert warnings == ["/dev/loop3: overwriting a ext4 filesystem signature (--force)"]


def test_clean_device_is_safe(devices):
    assert check_safe_to_overwrite("/dev/loop3", force=False, read_head=bytes(69632)) == []


def test_head_is_read_from_the_device_by_default(fs):
    fs.create_file("/proc/self/mounts", contents="")
    make_block_device(fs, "/dev/sdz", 8, 16, contents=EXT4_HEAD)
    with pytest.raises(RefusedError, match="ext4"):
        check_safe_to_overwrite("/dev/sdz", force=False)
    make_block_device(fs, "/dev/sdy", 8, 32, contents=bytes(100))  # shorter than the read
    assert check_safe_to_overwrite("/dev/sdy", force=False) == []


def test_other_mounts_and_sys_paths(fs):
    fs.create_file("/elsewhere/mounts", contents="/dev/loop5 /data ext4 rw 0 0\n")
    fs.create_dir("/elsewhere/sys/dev/block/7:6/holders/dm-3")
    make_block_device(fs, "/dev/loop5", 7, 5)
    make_block_device(fs, "/dev/loop6", 7, 6)
    kwargs = {"mounts_path": "/elsewhere/mounts", "sys_root": "/elsewhere/sys", "read_head": b""}
    with pytest.raises(RefusedError, match="mounted"):
        check_safe_to_overwrite("/dev/loop5", force=False, **kwargs)
    with pytest.raises(RefusedError, match="dm-3"):
        check_safe_to_overwrite("/dev/loop6", force=False, **kwargs)


def test_unreadable_mount_table_is_io_failure(fs):
    make_block_device(fs, "/dev/loop0", 7, 0)
    with pytest.raises(IOFailure, match="mount table"):
        check_safe_to_overwrite("/dev/loop0", force=True, mounts_path="/nope/mounts", read_head=b"")


def test_regular_file_checks_only_the_signature(fs):
    # A file named in the mount table is not a device: only its contents matter.
    fs.create_file("/proc/self/mounts", contents="/data/wal.img /mnt ext4 rw 0 0\n")
    fs.create_file("/data/wal.img", contents=bytes(8192))
    assert check_safe_to_overwrite("/data/wal.img", force=False) == []
    fs.create_file("/data/disk.img", contents=b"XFSB" + bytes(8188))
    with pytest.raises(RefusedError, match="XFS filesystem signature"):
        check_safe_to_overwrite("/data/disk.img", force=False)
    assert check_safe_to_overwrite("/data/disk.img", force=True) == [
        "/data/disk.img: overwriting a XFS filesystem signature (--force)"]
    fs.create_file("/data/tiny.img", contents=b"hsq")  # shorter than any signature
    assert check_safe_to_overwrite("/data/tiny.img", force=False) == []


def test_missing_and_wrong_kinds(fs):
    with pytest.raises(NotFoundError):
        check_safe_to_overwrite("/dev/nothing", force=True)
    fs.create_dir("/data")
    with pytest.raises(UsageError):
        check_safe_to_overwrite("/data", force=True)
