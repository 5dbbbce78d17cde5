"""walctl.device.aio's batch of completions (issue 31): the callbacks of the whole writes one reaping
takes off the ring learn, in the queue's thread-local ``batch.more``, how many of the batch come after
them (the WAL writer books the first ones' writes and makes them durable together at the last: one
io_submit of the next writes, one wake-up). Outside a batch, and in any other thread, it is 0. Each
test runs on both backends (the C extension and ctypes)."""

from __future__ import annotations

import threading

from walctl.device import aligned_buffer

from test_aio_backends import backend, dev, make_queue  # noqa: F401 - the native/ctypes and device fixtures, shared


class AllAtOnce:
    """The queue's AIO context, its io_getevents waiting for every write in flight (``want``): one batch."""

    def __init__(self, io, want: int):
        self.inner, self.want = io, want

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def getevents(self, min_nr, timeout_s):
        return self.inner.getevents(max(min_nr, self.want), 10.0)


def test_each_callback_of_a_batch_sees_how_many_follow_it(dev, backend):
    queue = make_queue(dev, backend, depth=4, reaper=False)
    try:
        queue._io = AllAtOnce(queue._io, 3)
        seen, elsewhere = [], []
        bufs = [aligned_buffer(4096) for _ in range(3)]

        def done(i):
            def callback(error, flush_ns=0):
                seen.append((i, error, queue.batch.more))
                if i == 0:  # another thread meanwhile: not in a batch
                    t = threading.Thread(target=lambda: elsewhere.append(getattr(queue.batch, "more", 0)))
                    t.start()
                    t.join()
            return callback

        for i, buf in enumerate(bufs):
            buf[:] = bytes([i + 1]) * 4096
            queue.submit(i * 4096, buf, done(i))
        assert queue.wait(5.0, held=True) == 3
        assert sorted(s[0] for s in seen) == [0, 1, 2]
        assert [(s[1], s[2]) for s in seen] == [(None, 2), (None, 1), (None, 0)]
        assert elsewhere == [0]
        assert queue.batch.more == 0  # after the batch
        # a batch of one: its callback is the last
        seen.clear()
        queue._io.want = 1
        queue.submit(0, bufs[0], done(3))
        assert queue.wait(5.0, held=True) == 1
        assert seen == [(3, None, 0)]
    finally:
        queue.close()
    with open(dev.path, "rb") as f:
        assert f.read(4096 * 3) == bytes([1]) * 4096 + bytes([2]) * 4096 + bytes([3]) * 4096
