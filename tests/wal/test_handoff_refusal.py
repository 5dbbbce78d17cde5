"""A writer's trim listener refuses a peer of another uid with an ERR line that the real client
(request_trim, which sends its request first) reads: not a connection reset that the client
reports as a failed hand-off to retry."""

import os
import pickle
import shutil
import tempfile

import pytest

from walctl.wal import handoff
from walctl.wal.handoff import request_trim, start_listener


class _Writer:
    def __init__(self):
        self.acked_end = 1 << 20
        self.calls = []

    def trim_to(self, offset, uploaded=False):
        self.calls.append((offset, uploaded))
        return 0


@pytest.fixture
def other_user_dir():
    """A directory another user can search (pytest's tmp dirs are 0700): the client names the
    writer's socket from the WAL's stat."""
    path = tempfile.mkdtemp(prefix="walctl-handoff-")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to ask as another uid")
@pytest.mark.parametrize("round_", range(5))
def test_another_uid_asking_through_request_trim_gets_the_refusal(other_user_dir, round_):
    wal = os.path.join(other_user_dir, "wal.img")
    open(wal, "wb").close()
    os.chmod(wal, 0o644)
    writer = _Writer()
    listener = start_listener(wal, writer)
    assert listener is not None
    try:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: another user runs upload, whose trim asks the writer
            try:
                os.close(r)
                os.setuid(65534)
                os.write(w, pickle.dumps(request_trim(wal, 5)))
            finally:
                os._exit(0)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            answer = pickle.loads(f.read())
        os.waitpid(pid, 0)
    finally:
        listener.close()
    assert answer == ("ERR", "5 refused: uid 65534 may not trim this WAL")
    assert writer.calls == []
    assert handoff.REQUEST_TIMEOUT_S > 0
