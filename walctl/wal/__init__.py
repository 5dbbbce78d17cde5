"""The WAL engine: header slots, the recovery scan, the writer, and the operations commands call."""
