"""Pure bytes <-> frozen dataclasses for every on-disk and in-object structure (no I/O)."""
