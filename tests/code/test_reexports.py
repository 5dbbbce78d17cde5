"""The split module keeps its old import path (issue 12 item 4).

``walctl.device.blockio`` was a single module; its code now lives in one module per room,
and it re-exports them. Every public name the old module had must still import from it and
be the very object of its new home (so an isinstance check or an identity comparison gives
the same answer either way). (``walctl.format.object`` stays one module for now: its split,
item 5, waits for the branches that are still growing it.)
"""

from __future__ import annotations

import importlib

import pytest

OLD_NAMES = {
    "walctl.device.blockio": (
        "BLKSSZGET", "BLKGETSIZE64", "BLKZEROOUT", "ZERO_CHUNK_BYTES", "BUFFERED_WARNING", "Device",
        "DirectDevice", "BufferedDevice", "MemoryDevice", "FaultyDevice", "WriteDone", "IO_ENGINES",
        "IO_ENGINE_ENV", "ThreadWriteQueue", "AioWriteQueue", "open_write_queue", "open_device", "LockEntry",
        "parse_proc_locks", "lock_holder", "create_file", "zero_fill", "bytes_read_total",
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
