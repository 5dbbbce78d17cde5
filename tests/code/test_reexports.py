"""The split modules keep their old import paths (issue 12 items 4 and 5).

``walctl.device.blockio`` was a single module; its code now lives in one module per room,
and it re-exports them. ``walctl.format.object`` likewise: each structure (DataBlock header,
index entry, IndexBlock, footer, composite object) has its own module and the old module,
which keeps what is about a whole object, re-exports them. Every public name the old module
had must still import from it and be the very object of its new home (so an isinstance
check or an identity comparison gives the same answer either way).
"""

from __future__ import annotations

import importlib

import pytest

OLD_NAMES = {
    # Only what commands/, bench/ and wal/image.py still import from it (issue 29 item 5 dropped the rest).
    "walctl.device.blockio": (
        "AioWriteQueue", "IO_ENGINE_ENV", "bytes_read_total", "create_file", "open_device", "open_write_queue",
        "zero_fill",
    ),
    "walctl.format.object": (
        "DATA_BLOCK_MAGIC", "DATA_BLOCK_FLAGS", "DATA_BLOCK_HEADER_STRUCT", "DATA_BLOCK_HEADER_SIZE",
        "DataBlockHeader", "INT32_MAX", "INT64_LIMIT", "INDEX_ENTRY_STRUCT", "INDEX_ENTRY_SIZE", "IndexEntry",
        "decode_index", "find_entries", "FOOTER_MAGIC", "VERSION_AUTOMQ", "VERSION_WALCTL", "VERSIONS",
        "FOOTER_STRUCT", "FOOTER_SIZE", "Footer", "check_data_crc", "COMPOSITE_FOOTER_MAGIC",
        "OBJECTS_BLOCK_MAGIC", "OBJECTS_BLOCK_HEADER_STRUCT", "OBJECTS_BLOCK_HEADER_SIZE",
        "LINKED_OBJECT_STRUCT", "LINKED_OBJECT_SIZE", "is_composite", "LinkedObject", "CompositeObject",
        "decode_composite",
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
