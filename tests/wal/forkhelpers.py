"""A fork server for tests that SIGKILL many short-lived writers (``walctl append``): one Python that
has imported walctl's CLI forks each writer, so a writer costs milliseconds of CPU instead of an
interpreter start (~0.3 s). Each child is a process of its own running ``walctl.cli.main()`` with
its stdin, stdout and stderr opened from the paths given (files or FIFOs), killed by a real
signal; the server reaps it and reports its wait status. Not for what a test of the entry
point's own start-up checks: that stays ``python -m walctl``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

_SERVER = textwrap.dedent("""
    import json, os, sys
    import walctl.cli, walctl.commands.append  # imported once, here, before the forks
    import walctl.pipeline.upload, walctl.store.local, walctl.format.object
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "spawn":
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    os.environ.update(cmd.get("env", {}))
                    for fd, path, flags in ((0, cmd["stdin"], os.O_RDONLY),
                                            (1, cmd["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                            (2, cmd["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
                        os.dup2(os.open(path, flags, 0o644), fd)
                    sys.stdin = open(0, "r", closefd=False)
                    sys.stdout = open(1, "w", closefd=False)
                    sys.stderr = open(2, "w", closefd=False)
                    sys.argv = ["walctl", *cmd["args"]]
                    try:
                        walctl.cli.main()
                        code = 0
                    except SystemExit as exc:
                        code = exc.code if isinstance(exc.code, int) else 1
                finally:
                    sys.stdout.flush()
                    os._exit(code)
            print(pid, flush=True)
        elif cmd["op"] == "wait":
            _, status = os.waitpid(cmd["pid"], 0)
            print(status, flush=True)
""")


class ForkServer:
    """``spawn(args, stdin=, stdout=, stderr=, env=) -> pid`` (stdin opened first, then stdout: a FIFO
    blocks the child until the test opens its other end), ``wait(pid) -> wait status``, ``close()``."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"

    def _call(self, **cmd) -> int:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def spawn(self, args: list[str], *, stdin: str, stdout: str, stderr: str, env: dict | None = None) -> int:
        return self._call(op="spawn", args=[str(a) for a in args], stdin=str(stdin), stdout=str(stdout),
                          stderr=str(stderr), env=env or {})

    def wait(self, pid: int) -> int:
        return self._call(op="wait", pid=pid)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()


def alive(pid: int) -> bool:
    """The fork server's child still runs (not yet a zombie waiting for the server's waitpid)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False
