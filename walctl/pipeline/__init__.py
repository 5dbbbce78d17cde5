"""Pipelines that join the WAL and the store (above wal/ and store/, never imported by them)."""
