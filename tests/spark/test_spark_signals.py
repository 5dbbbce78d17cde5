"""compact's deferral of SIGINT/SIGTERM (its commits, the JVM's start) is device/signals.py's
signals_deferred, by handlers (mask=False): a signal waits for the block's end, and a child started
inside (Spark's JVM) does not inherit SIGINT/SIGTERM blocked."""

from __future__ import annotations

import json
import subprocess
import sys

_SCRIPT = r"""
import json, os, signal, subprocess
from walctl.device.signals import signals_deferred

def blocked_in_child():
    status = subprocess.run(["cat", "/proc/self/status"], capture_output=True, text=True).stdout
    mask = int(next(l for l in status.splitlines() if l.startswith("SigBlk:")).split()[1], 16)
    return [s for s in (signal.SIGINT, signal.SIGTERM) if mask & (1 << (s - 1))]

def interrupt(signum, frame):  # as the CLI's boundary does (it raises Interrupted)
    raise KeyboardInterrupt

signal.signal(signal.SIGTERM, interrupt)
out = {}
try:
    with signals_deferred(mask=MASK):
        os.kill(os.getpid(), signal.SIGTERM)
        out["child_blocked"] = [int(s) for s in blocked_in_child()]
        out["finished_block"] = True
except KeyboardInterrupt:
    out["interrupted_after"] = True
out["handler_restored"] = signal.getsignal(signal.SIGTERM) is interrupt
print(json.dumps(out))
"""


def run(mask: bool) -> dict:
    proc = subprocess.run([sys.executable, "-c", _SCRIPT.replace("MASK", str(mask))],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_handlers_hold_the_signal_and_leave_children_unblocked():
    out = run(False)
    assert out == {"child_blocked": [], "finished_block": True, "interrupted_after": True,
                   "handler_restored": True}


def test_the_mask_would_block_them_in_the_child():
    # Why compact's blocks use handlers: the masked form (the WAL writer's) passes the mask on.
    out = run(True)
    assert out == {"child_blocked": [2, 15], "finished_block": True, "interrupted_after": True,
                   "handler_restored": True}
