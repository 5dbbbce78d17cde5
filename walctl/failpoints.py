"""Named crash points for fault tests (like etcd's gofail): ``WALCTL_FAILPOINT=name`` SIGKILLs the
process when execution reaches ``failpoint(name)``. Unset in production: a dictionary lookup.
"""

from __future__ import annotations

import os
import signal


def failpoint(name: str) -> None:
    if os.environ.get("WALCTL_FAILPOINT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
