"""The split modules keep their old import paths (issue 12 items 4 and 5).

``walctl.device.blockio`` and ``walctl.format.object`` were single modules; their code now
lives in one module per room or structure, and they re-export it. Every public name the old
modules had must still import from them and be the very object of its new home (so an
isinstance check or an identity comparison gives the same answer either way).
"""

from __future__ import annotations

import importlib

import pytest

OLD_NAMES = {
    "walctl.device.blockio": (
        "BLKSSZGET", "BLKGETSIZE64", "BLKZEROOUT", "ZERO_CHUNK_BYTES", "BUFFERED_WARNING", "Device",
        "DirectDevice", "BufferedDevice", "MemoryDevice", "FaultyDevice", "WriteDone", "IO_ENGINES",
        "IO_ENGINE_ENV", "ThreadWriteQueue", "AioWriteQueue", "open_write_queue", "open_device", "LockEntry",
        "parse_proc_locks", "lock_holder", "create_file", "zero_fill",
    ),
    "walctl.format.object": (
        "DATA_BLOCK_MAGIC", "DATA_BLOCK_FLAGS", "FOOTER_MAGIC", "VERSION_AUTOMQ", "VERSION_WALCTL", "VERSIONS",
        "DEFAULT_BLOCK_SIZE", "DEFAULT_ENTRIES_GUESS", "INT32_MAX", "INT64_LIMIT", "DATA_BLOCK_HEADER_STRUCT",
        "DATA_BLOCK_HEADER_SIZE", "INDEX_ENTRY_STRUCT", "INDEX_ENTRY_SIZE", "FOOTER_STRUCT", "FOOTER_SIZE",
        "DataBlockHeader", "IndexEntry", "Footer", "decode_index", "check_data_crc", "tail_length_hint",
        "parse_tail", "find_entries", "StreamRange", "BuiltObject", "build_object", "assemble_object",
        "iter_blocks", "Problem", "verify_object",
    ),
}


@pytest.mark.parametrize("module_name", sorted(OLD_NAMES))
def test_every_old_name_still_imports_and_is_its_new_homes_object(module_name):
    module = importlib.import_module(module_name)
    package = importlib.import_module(module_name.rsplit(".", 1)[0])
    for name in OLD_NAMES[module_name]:
        value = getattr(module, name)  # AttributeError names the one that went missing
        homes = [m for m in vars(package).values()
                 if getattr(m, "__name__", "").startswith(package.__name__ + ".")
                 and m is not module and getattr(m, name, None) is value]
        assert homes, f"{module_name}.{name} is not the object of any sibling module"
