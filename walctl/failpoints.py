"""Named crash points for fault tests (like etcd's gofail): ``WALCTL_FAILPOINT=name`` SIGKILLs the
process when execution reaches ``failpoint(name)``; ``WALCTL_FAILPOINT=name:pause`` stops there
(touching the file ``WALCTL_FAILPOINT_READY`` names, if set) until a signal ends the process, so a
test can SIGTERM a command in the middle of its work; ``WALCTL_FAILPOINT=name:wait`` stops there the
same way, then goes on once the file ``WALCTL_FAILPOINT_RESUME`` names exists (later passes do not
stop), so a test can place another process's step exactly inside this one's work (a writer's start
inside a reader's scan). Unset in production: a dictionary lookup.
"""

from __future__ import annotations

import os
import signal
import time

PAUSE_LIMIT_S = 120.0  # a paused process nobody signals goes on after this


def failpoint(name: str) -> None:
    wanted = os.environ.get("WALCTL_FAILPOINT")
    if wanted == name:
        os.kill(os.getpid(), signal.SIGKILL)
    elif wanted == f"{name}:pause":
        ready = os.environ.get("WALCTL_FAILPOINT_READY")
        if ready:
            with open(ready, "w") as f:
                f.write(str(os.getpid()))
        deadline = time.monotonic() + PAUSE_LIMIT_S
        while time.monotonic() < deadline:
            time.sleep(0.01)
    elif wanted == f"{name}:wait":
        ready, resume = os.environ.get("WALCTL_FAILPOINT_READY"), os.environ.get("WALCTL_FAILPOINT_RESUME", "")
        if ready and not os.path.exists(ready):
            with open(ready, "w") as f:
                f.write(str(os.getpid()))
        deadline = time.monotonic() + PAUSE_LIMIT_S
        while not os.path.exists(resume) and time.monotonic() < deadline:
            time.sleep(0.01)
