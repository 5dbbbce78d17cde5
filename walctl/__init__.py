"""walctl: a write-ahead log on a raw block device, and the objects it becomes."""

__version__ = "0.1.0"
