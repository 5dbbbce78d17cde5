"""Named crash points for fault tests (like etcd's gofail): ``WALCTL_FAILPOINT=name`` SIGKILLs the
process when execution reaches ``failpoint(name)``; ``WALCTL_FAILPOINT=name:pause`` stops there
(touching the file ``WALCTL_FAILPOINT_READY`` names, if set) until a signal ends the process, so a
test can SIGTERM a command in the middle of its work; ``name:hold`` stops there the same way until
the test removes that file, then goes on (later arrivals at ``name`` go straight on), so a test can
run something else at exactly that point.
Unset in production: a dictionary lookup.
"""

from __future__ import annotations

import os
import signal
import time

PAUSE_LIMIT_S = 120.0  # a paused process nobody signals goes on after this
_held: set[str] = set()  # the ``name:hold`` failpoints this process has held once


def failpoint(name: str) -> None:
    wanted = os.environ.get("WALCTL_FAILPOINT")
    if wanted == name:
        os.kill(os.getpid(), signal.SIGKILL)
    elif wanted == f"{name}:pause" or (wanted == f"{name}:hold" and name not in _held):
        _held.add(name)
        ready = os.environ.get("WALCTL_FAILPOINT_READY")
        if ready:
            with open(ready, "w") as f:
                f.write(str(os.getpid()))
        hold = wanted.endswith(":hold")
        deadline = time.monotonic() + PAUSE_LIMIT_S
        while time.monotonic() < deadline and not (hold and ready and not os.path.exists(ready)):
            time.sleep(0.01)
