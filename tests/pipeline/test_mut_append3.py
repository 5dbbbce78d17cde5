"""walctl append's engine (walctl/pipeline/append.py), the last survivor of its mutmut run (issue 32):
why a full ring stays full when the writer-side upload fails with an error that has no message."""

from __future__ import annotations

import pytest

from walctl.errors import FullError
from walctl.pipeline.append import AppendHooks, AppendRequest, append
from walctl.store.local import LocalStore

from tests.pipeline.test_mut_append import KiB, fast_uploads, fill, make  # noqa: F401 - fast_uploads: a fixture


def test_a_background_upload_failing_without_a_message_is_still_why_the_ring_stays_full(
        tmp_path, fast_uploads, monkeypatch):  # noqa: F811 - the fixture imported above
    path = make(tmp_path)
    store = LocalStore(tmp_path / "store")

    def broken(*a, **kw):
        raise RuntimeError()  # str() of it is ""

    monkeypatch.setattr(fast_uploads, "upload", broken)
    with pytest.raises(FullError) as e:
        append(AppendRequest(path, 1, fill(), store=store.url, upload_at_bytes=100 * KiB, full_wait_s=0.3),
               AppendHooks(on_warning=lambda w: None))
    assert e.value.what == ("WAL full: nothing freed room for 0.3 s (the background upload is failing: "
                            "an error without a message)")
