"""The store's metadata (docs/FORMATS.md 5): immutable, numbered manifest snapshots.

Commit N+1 is created only if absent (S3 If-None-Match: *, or create-exclusive +
fsync locally), so two writers can never both commit N+1: the loser re-reads the
newest manifest, re-applies its change (which re-checks its preconditions), and
tries N+2. Object ids are reserved by one commit (prepare) before their objects
are written, and made live by a later one, so a crash leaves only prepared ids
(garbage for gc), never a manifest pointing at a missing object.
"""

from __future__ import annotations

import copy
import json
import os
import re
import socket
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Callable

from walctl.errors import CorruptionError, NotFoundError, RefusedError
from walctl.store.base import Store

MANIFEST_DIR = "manifest"
MANIFEST_VERSION = 1
NUMBER_DIGITS = 20  # zero-padded so that listing order is commit order
DEFAULT_NAMESPACE = "default"
PREPARE_TTL_S = 3600  # a prepared id older than this is garbage (its upload died or gave up)
MAX_COMMIT_ATTEMPTS = 20


def manifest_key(number: int) -> str:
    return f"{MANIFEST_DIR}/{number:0{NUMBER_DIGITS}d}.json"


def object_key(object_id: int, namespace: str = DEFAULT_NAMESPACE) -> str:
    """``<reverse of the 8+ hex digits of the id>/<namespace>/<id>``: reversed hex spreads S3 partitions."""
    return f"{f'{object_id:08x}'[::-1]}/{namespace}/{object_id}"


def empty_manifest() -> dict:
    """The state before the first commit (number 0 is never written)."""
    return {
        "version": MANIFEST_VERSION, "number": 0, "parent": None, "commit_id": None, "time": None,
        "writer": None, "next_object_id": 1, "compactor_epoch": 0, "streams": {}, "objects": [],
        "prepared": [], "deleting": [], "wal_uploads": {},
    }


@dataclass(frozen=True)
class Committed:
    number: int
    manifest: dict
    attempts: int


def parse_manifest(raw: bytes, key: str) -> dict:
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise CorruptionError(f"manifest is not valid JSON: {exc}", where=key) from exc
    required = empty_manifest().keys()
    if not isinstance(doc, dict) or any(k not in doc for k in required):
        raise CorruptionError("manifest lacks required fields", where=key,
                              hint="not written by walctl, or damaged")
    if doc["version"] != MANIFEST_VERSION:
        raise CorruptionError(f"manifest version {doc['version']} is not {MANIFEST_VERSION}", where=key)
    return doc


def manifest_numbers(store: Store) -> list[int]:
    numbers = []
    for info in store.list(MANIFEST_DIR + "/"):
        name = info.key.rsplit("/", 1)[-1]
        if name.endswith(".json") and name[:-5].isdigit():
            numbers.append(int(name[:-5]))
    return sorted(numbers)


def load_latest(store: Store, *, required: bool = False) -> dict:
    """The newest manifest, or the empty state when the store has none yet.

    Raises:
        NotFoundError: ``required`` (a command that only reads) and the store has no manifest.
    """
    numbers = manifest_numbers(store)
    if not numbers:
        if required:
            raise NotFoundError("no manifest: not a walctl store, or nothing uploaded yet",
                                where=f"{getattr(store, 'url', store)}/{MANIFEST_DIR}/",
                                hint="check --store; the first 'walctl upload' creates the store")
        return empty_manifest()
    key = manifest_key(numbers[-1])
    doc = parse_manifest(store.read_all(key), key)
    if doc["number"] != numbers[-1]:
        raise CorruptionError(f"manifest says number {doc['number']}", where=key)
    return doc


def load(store: Store, number: int) -> dict:
    key = manifest_key(number)
    return parse_manifest(store.read_all(key), key)


def commit(store: Store, change: Callable[[dict], dict | None], *, command: str) -> Committed:
    """Apply ``change`` to the newest manifest and create the next one, only if absent.

    ``change`` gets a deep copy of the newest manifest, edits it (or returns a new
    one), and raises RefusedError when its preconditions no longer hold; it is
    re-run after every lost race, against the manifest that won.
    """
    from walctl.store.base import PreconditionFailed

    for attempt in range(1, MAX_COMMIT_ATTEMPTS + 1):
        base = load_latest(store)
        doc = copy.deepcopy(base)
        result = change(doc)
        if result is not None:
            doc = result
        doc.update({
            "number": base["number"] + 1,
            "parent": base["number"] or None,
            "commit_id": str(uuid.uuid4()),
            "time": time.time(),
            "writer": {"host": socket.gethostname(), "pid": os.getpid(), "command": command,
                       "argv": _safe_argv()},
        })
        payload = json.dumps(doc, indent=1, sort_keys=True).encode()
        try:
            store.put(manifest_key(doc["number"]), payload, if_absent=True)
        except PreconditionFailed:
            time.sleep(min(0.05 * attempt, 0.5))  # someone else committed first: re-read, re-check
            continue
        return Committed(doc["number"], doc, attempt)
    raise RefusedError(f"could not commit after {MAX_COMMIT_ATTEMPTS} attempts: the store is too busy",
                       where=store.url, hint="retry later")


_SECRET_WORDS = ("secret", "token", "password", "passwd", "credential", "key=", "access-key", "access_key")
_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")


def _safe_argv(argv: list[str] | None = None) -> list[str]:
    """The command line, without anything that looks like a secret: values of secret-named
    flags (``--secret-key X`` and ``--secret-key=X``) and user:password@ in URLs."""
    out: list[str] = []
    redact_next = False
    for arg in (sys.argv[1:] if argv is None else argv):
        lowered = arg.lower()
        if redact_next:
            out.append("<redacted>")
            redact_next = False
            continue
        if any(w in lowered for w in _SECRET_WORDS):
            if arg.startswith("-") and "=" not in arg:
                out.append(arg)
                redact_next = True  # the value follows as the next argument
            else:
                out.append(arg.split("=", 1)[0] + "=<redacted>" if "=" in arg else "<redacted>")
            continue
        out.append(_USERINFO.sub("<redacted>@", arg))
    return out


# -- helpers over the manifest dict -------------------------------------------------

def prepare_ids(doc: dict, count: int, namespace: str, *, now: float | None = None) -> list[dict]:
    """Reserve ``count`` ids in ``doc`` (to be committed): returns the prepared entries."""
    now = time.time() if now is None else now
    first = doc["next_object_id"]
    doc["next_object_id"] = first + count
    entries = [{"id": i, "key": object_key(i, namespace), "prepared_at": now, "expires_at": now + PREPARE_TTL_S}
               for i in range(first, first + count)]
    doc["prepared"].extend(entries)
    return entries


def referenced_ids(doc: dict) -> set[int]:
    return ({o["id"] for o in doc["objects"]} | {p["id"] for p in doc["prepared"]}
            | {d["id"] for d in doc["deleting"]})
