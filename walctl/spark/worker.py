"""A local master's Python worker: Spark's own (pyspark.worker) from the installed pyspark.

Spark starts its workers with its pyspark.zip, py4j zip and spark-core jar first on
PYTHONPATH. Python compiles a zip's modules from source at every start (zipimport caches no
bytecode), and the worker re-reads the archives' directories (the jar's ~6000 entries) when
it sets up the task's files (importlib.invalidate_caches): ~0.7 s of each worker's start and
~13 MiB of its memory. The same modules installed beside this interpreter are compiled
once, and the jar holds no Python. Used
(``spark.python.worker.module``) only where the workers run the driver's interpreter, whose
pyspark is an installed one (the one talking to the JVM); when the worker finds no pyspark
outside the zips it keeps them.

The worker connects back to the JVM first and imports pyspark after (``connect_first``):
Spark starts a job's workers one at a time, each once the previous one has connected, and
pyspark.worker connects only after its imports (~0.15 s of CPU, more on a busy machine), so
the second task of a job started that much after the first. Connected first, the next worker
starts while this one imports, and the JVM sends the task meanwhile.
"""

import os
import runpy
import socket
import struct
import sys
from importlib.machinery import PathFinder


def spark_zip(entry: str) -> bool:
    """A path entry that is one of Spark's archives: pyspark.zip, py4j-*-src.zip, a jar of its
    jars/ directory."""
    folder, _, name = entry.replace("\\", "/").rpartition("/")
    return ((name.endswith(".zip") and name.startswith(("pyspark", "py4j")))
            or (name.endswith(".jar") and folder.rpartition("/")[2] == "jars"))


def without_spark_zips() -> bool:
    """Drop Spark's archives from the import path (and their importers) when pyspark and py4j
    are importable without them; else leave the path as it is. True when the installed
    pyspark is the one imported (no archives, or they were dropped)."""
    zips = [p for p in sys.path if spark_zip(p)]
    if not zips:
        return True
    kept = [p for p in sys.path if not spark_zip(p)]
    if any(PathFinder.find_spec(name, kept) is None for name in ("pyspark", "py4j")):  # the path alone
        return False
    sys.path[:] = kept
    for path in zips:
        sys.path_importer_cache.pop(path, None)
    return True


def knows_protocol() -> bool:
    """True when the installed pyspark's worker connects the way ``connect`` does: its
    pyspark.worker_util has get_sock_file_to_executor (pyspark 4), read from its source without
    importing pyspark (which is what would take the time)."""
    spec = PathFinder.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return False
    for folder in spec.submodule_search_locations:
        try:
            with open(os.path.join(folder, "worker_util.py"), encoding="utf-8") as f:
                return "def get_sock_file_to_executor(" in f.read()
        except OSError:
            continue
    return False


def _write_int(value: int, stream) -> None:
    stream.write(struct.pack("!i", value))


def connect():
    """Connect back to the JVM as pyspark.worker_util.get_sock_file_to_executor does (the same
    environment, socket, timeout, authentication and pid message); returns the socket's file."""
    conn_info = os.environ.get("PYTHON_WORKER_FACTORY_SOCK_PATH",
                               int(os.environ.get("PYTHON_WORKER_FACTORY_PORT", -1)))
    auth_secret = os.environ.get("PYTHON_WORKER_FACTORY_SECRET")
    timeout = int(os.environ.get("SPARK_AUTH_SOCKET_TIMEOUT", 15))
    buffer = int(os.environ.get("SPARK_BUFFER_SIZE", 65536))
    if isinstance(conn_info, str) and auth_secret is None:  # a Unix domain socket: no authentication
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(conn_info)
        except OSError:
            sock.close()
            raise
        sockfile = sock.makefile("rwb", buffer)
    else:
        addr = "::1" if os.environ.get("SPARK_PREFER_IPV6", "false").lower() == "true" else "127.0.0.1"
        errors = []
        sockfile = None
        for af, socktype, proto, _, sa in socket.getaddrinfo(addr, conn_info, socket.AF_UNSPEC, socket.SOCK_STREAM):
            sock = socket.socket(af, socktype, proto)
            try:
                sock.settimeout(timeout)
                sock.connect(sa)
                sockfile = sock.makefile("rwb", buffer)
                secret = auth_secret.encode("utf-8")
                _write_int(len(secret), sockfile)
                sockfile.write(secret)
                sockfile.flush()
                (length,) = struct.unpack("!i", sockfile.read(4))
                if length < 0 or sockfile.read(length) != b"ok":
                    raise ConnectionError("unexpected response from the JVM while authenticating")
                break
            except OSError as exc:
                errors.append(f"tried to connect to {sa}, but an error occurred: {exc}")
                sock.close()
                sockfile = None
        if sockfile is None:
            raise ConnectionError(f"cannot connect back to the JVM: {errors}")
    _write_int(os.getpid(), sockfile)
    sockfile.flush()
    return sockfile


def main(module: str) -> None:
    installed = without_spark_zips()
    if module == "pyspark.worker" and installed and knows_protocol():
        sockfile = connect()  # the JVM may start the next worker now
        try:
            from pyspark.worker import main as work

            work(sockfile, sockfile)
        finally:
            sockfile.close()
        return
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main("pyspark.worker")
