"""A SIGTERM while `walctl bench`'s raw loop submits its first writes (ClosedLoop.start; the first
submits of the callbacks path, with a reaper thread) waits for the submissions to finish: raised
inside AioWriteQueue.submit, after the queue took a slot and before its io_submit, it left a write
counted that never completes, and the drain and the queue's close waited for it for ever (a
SIGTERMed bench hung: tests/cli/test_signals.py's bench test once timed out). The signal comes from
the low-level submit itself, at that very point, in a subprocess under the CLI's handler; the run
must end with the interruption, every write in flight drained."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.cli.conftest import REPO_ROOT, _env

_SCRIPT = textwrap.dedent('''
    import os, signal, sys
    from walctl.bench import raw
    from walctl.cli.boundary import signals_interrupt
    from walctl.device import open_device
    from walctl.device.blockio import open_write_queue

    path = sys.argv[1]
    with open(path, "wb") as f:
        f.truncate(4 << 20)
    dev = open_device(path, writable=True)
    queue = open_write_queue(dev, 4, "aio", reaper=sys.argv[2] == "reaper")
    if queue.engine != "aio":
        print("no-aio")
        sys.exit(0)
    sent = []

    class SignalAtSubmit:  # the queue's native context, its first submit preceded by a SIGTERM
        def __init__(self, io):
            self.io = io

        def __getattr__(self, name):
            return getattr(self.io, name)

        def submit(self, *args):  # the queue has taken the slot: the signal lands before the io_submit
            if not sent:
                sent.append(os.kill(os.getpid(), signal.SIGTERM))
                for _ in range(100_000):  # statements: the handler runs meanwhile, unless held
                    pass
            return self.io.submit(*args)

    queue._io = SignalAtSubmit(queue._io)
    try:
        with signals_interrupt():
            raw.run_raw(queue, "iops", block_size=4096, region_start=0, region_bytes=4 << 20, iodepth=4,
                        duration_s=20)
    except KeyboardInterrupt as exc:
        print("interrupted", getattr(exc, "signum", None), queue._outstanding)
    queue.close()
    dev.close()
    print("closed")
''')


@pytest.mark.parametrize("loop", ["closed", "reaper"])  # ClosedLoop.start; _run_callbacks' first submits
def test_a_sigterm_during_the_first_submits_is_held_and_the_run_drains(tmp_path, loop):
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path / "bench.img"), loop], capture_output=True,
                          text=True, env=_env({}), cwd=str(REPO_ROOT), timeout=60)
    assert proc.returncode == 0, proc.stderr
    if proc.stdout.split() == ["no-aio"]:
        pytest.skip("native AIO is unavailable here")
    # raised once the submissions were whole, well before the 20 s run's end; nothing left counted
    assert proc.stdout.split() == ["interrupted", "15", "0", "closed"], proc.stdout
