"""walctl selftest: the whole pipeline, run and checked on this machine, in a temporary directory.

On a regular file or, with ``loop``, on a fresh loop device with direct I/O, and a temporary
local object store, it runs the real commands (the table of steps in ``steps``):

    init, status, append (arguments; length-prefixed stdin), recover, trim, recover,
    status, upload, append --store, upload --metrics-file, ls, inspect-object --deep, read,
    read back every object, compact (Spark local[1]; optional), gc, status

and checks every answer against what it wrote. It stops at the first failed check (the later
ones depend on it) and always cleans up: the loop device is detached and the temporary
directory removed (unless ``keep``), on failure and on Ctrl-C/SIGTERM too. The machinery
(result, running a command, set-up, clean-up) is in ``runner``. It never prints.
"""

from walctl.selftest.runner import (CHECK_FAILED, EXIT_CODES, FAIL, IO_FAILED, PASS, PREREQ_MISSING, SKIP, Answer,
                                    Check, Run, SelftestResult, StepFailed)
from walctl.selftest.runner import selftest as run_selftest
from walctl.selftest.steps import STEPS, Step


def selftest(app, **options) -> SelftestResult:
    """Run every step of STEPS through ``app`` (walctl.selftest.runner.selftest has the options)."""
    return run_selftest(app, STEPS, **options)


__all__ = ["CHECK_FAILED", "EXIT_CODES", "FAIL", "IO_FAILED", "PASS", "PREREQ_MISSING", "SKIP", "STEPS", "Answer",
           "Check", "Run", "SelftestResult", "Step", "StepFailed", "selftest"]
