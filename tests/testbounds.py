"""Bounds for every test (issue 32): a test that loops for ever or allocates without bound fails
alone, with a clear message, instead of taking the run (or the machine) down.

- Time: pytest-timeout (pyproject: ``timeout``), a SIGALRM that fails the running test.
- Memory: a watchdog thread in each pytest process samples its resident set every 0.1 s. Past
  WALCTL_TEST_RSS_CAP (bytes, default 4 GiB: the suite's largest test stays far below 1 GiB) it
  raises MemoryError in the main thread, where the test runs (SIGUSR1); if the process is still
  over the cap 10 s later (a loop that never returns to Python), it prints the test's name and ends
  the process (pytest-xdist then reports that test as failed on a crashed worker and goes on).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import pytest

RSS_CAP_BYTES = int(os.environ.get("WALCTL_TEST_RSS_CAP", str(4 << 30)))
SAMPLE_S = 0.1
GRACE_S = 10.0
_PAGE = os.sysconf("SC_PAGE_SIZE")
current_test: list[str] = ["(between tests)"]


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


class TestMemoryCap(MemoryError):
    """The running test's process grew past WALCTL_TEST_RSS_CAP."""


def _raise_cap(signum, frame) -> None:
    raise TestMemoryCap(f"test memory cap: the process grew past {RSS_CAP_BYTES >> 20} MiB "
                        f"(WALCTL_TEST_RSS_CAP) in {current_test[0]}")


def _watch(main_ident: int) -> None:
    over_since = None
    while True:
        time.sleep(SAMPLE_S)
        try:
            rss = rss_bytes()
        except OSError:
            return
        if rss <= RSS_CAP_BYTES:
            over_since = None
            continue
        now = time.monotonic()
        if over_since is None:
            over_since = now
            signal.pthread_kill(main_ident, signal.SIGUSR1)
        elif now - over_since > GRACE_S:
            sys.stderr.write(f"\nwalctl tests: {current_test[0]} grew to {rss >> 20} MiB, past the cap of "
                             f"{RSS_CAP_BYTES >> 20} MiB (WALCTL_TEST_RSS_CAP), and did not stop: ending this "
                             f"test process\n")
            sys.stderr.flush()
            os._exit(70)


def pytest_configure(config) -> None:
    """Install the handler and start the watchdog (once per process, from the main thread)."""
    if threading.current_thread() is not threading.main_thread() or RSS_CAP_BYTES <= 0:
        return
    signal.signal(signal.SIGUSR1, _raise_cap)
    threading.Thread(target=_watch, args=(threading.main_thread().ident,), name="test-rss-cap",
                     daemon=True).start()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    current_test[0] = item.nodeid
    yield
    current_test[0] = "(between tests)"
