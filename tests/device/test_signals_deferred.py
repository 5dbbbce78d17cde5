"""walctl.device.signals.signals_deferred holds SIGTERM/SIGINT for a few statements that must not be
split, also when another thread of the process takes the signal (the main thread's mask does not
hold it there; the CLI's handler still runs in the main thread): the interruption is raised as the
outermost block ends, never inside it. Cut inside the AIO reap, completions were lost and a drain
waited for ever (an append stopped by SIGTERM hung)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.cli.conftest import REPO_ROOT, _env

_SCRIPT = textwrap.dedent('''
    import os, signal, threading, time
    from walctl.cli.boundary import signals_interrupt
    from walctl.device.signals import signals_deferred

    threading.Thread(target=time.sleep, args=(5,), daemon=True).start()  # a thread that takes signals
    done = []
    try:
        with signals_interrupt():
            with signals_deferred():
                with signals_deferred():
                    os.kill(os.getpid(), signal.SIGTERM)  # masked here: the other thread takes it
                    for _ in range(200_000):  # statements: the handler runs in the main thread meanwhile
                        pass
                    time.sleep(0.2)
                    done.append("inner")
                done.append("outer")  # still held: the outer block has not ended
            done.append("after")
    except KeyboardInterrupt as exc:
        print(" ".join(done), type(exc).__name__, getattr(exc, "signum", None))
''')


def test_an_interrupt_taken_by_another_thread_is_raised_as_the_outermost_block_ends():
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=_env({}),
                          cwd=str(REPO_ROOT), timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["inner", "outer", "Interrupted", "15"], proc.stdout


def test_outside_a_block_the_interrupt_is_raised_at_once():
    script = _SCRIPT.replace("with signals_deferred():\n            with signals_deferred():",
                             "if True:\n            if True:")
    assert script != _SCRIPT
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=_env({}),
                          cwd=str(REPO_ROOT), timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["Interrupted", "15"], proc.stdout


_MASK_SCRIPT = textwrap.dedent('''
    import signal
    from walctl.cli.boundary import signals_interrupt
    from walctl.device.signals import signals_deferred

    def blocked():
        return sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, []) if int(s) in (2, 15))

    with signals_deferred():  # default handlers: only the mask holds a signal
        plain = blocked()
    with signals_interrupt():
        with signals_deferred():  # the CLI's handler holds it: no mask, no system call
            cli = blocked()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # one handler that does not hold: the mask again
        with signals_deferred():
            mixed = blocked()
    print(plain, cli, mixed)
''')


def test_under_the_clis_handler_a_block_holds_signals_without_the_mask():
    # The WAL writer enters a few blocks per block it writes; the mask cost two system calls each.
    proc = subprocess.run([sys.executable, "-c", _MASK_SCRIPT], capture_output=True, text=True, env=_env({}),
                          cwd=str(REPO_ROOT), timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[2, 15] [] [2, 15]", proc.stdout


_THREADS_SCRIPT = textwrap.dedent('''
    import os, signal, threading
    from walctl.device.signals import _Held, signals_deferred

    def blocked():
        return sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, []) if int(s) in (2, 15))

    def look(out):
        with signals_deferred() as section:
            out.append((section.held, _Held.depth, blocked()))

    seen = []
    look(seen)  # the main thread: held (the mask, default handlers)
    worker = threading.Thread(target=look, args=(seen,))
    worker.start()
    worker.join()  # another thread: nothing held, no depth, no mask
    pid = os.fork()  # from the main thread: the child's main thread is this one, and holds
    if pid == 0:
        child = []
        look(child)
        os.write(1, (repr(child[0]) + "\\n").encode())
        os._exit(0)
    os.waitpid(pid, 0)
    print(repr(seen[0]))
    print(repr(seen[1]))
''')


def test_a_section_holds_in_the_main_thread_only_also_in_a_child_forked_from_it():
    # signals_deferred takes the main thread's id once, at import (two Python calls a section less):
    # sections of other threads hold nothing, and a child forked from the main thread still holds.
    proc = subprocess.run([sys.executable, "-c", _THREADS_SCRIPT], capture_output=True, text=True,
                          env=_env({}), cwd=str(REPO_ROOT), timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["(True, 1, [2, 15])", "(True, 1, [2, 15])", "(False, 0, [])"], \
        proc.stdout
