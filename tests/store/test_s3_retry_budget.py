"""S3Store's retry budget (retry_for_s) over real HTTP, faults injected by the proxy: what is
retried past botocore's 5 quick attempts, what never is, what is said, and the conditional
writes that tell their own lost answer from someone else's object by the attempts count."""

from __future__ import annotations

import os
import time

import pytest

from walctl.errors import IOFailure, NotFoundError
from walctl.store import PreconditionFailed

MiB = 1 << 20


def _store(faulty_s3, warnings: list[str], retry_for_s: float = 10.0, **kwargs):
    return faulty_s3.make_store(retry_for_s=retry_for_s, on_warning=warnings.append, **kwargs)


def test_a_500_streak_longer_than_five_attempts_is_ridden_out(faulty_s3):
    warnings: list[str] = []
    store = _store(faulty_s3, warnings)
    store.put("k", b"payload")
    faulty_s3.proxy.fail(times=6, method="GET")
    assert store.read_all("k") == b"payload"
    assert [g.status for g in faulty_s3.proxy.seen("GET")] == [500] * 6 + [200]
    assert store.stats.get == 7 and store.stats.retries == 6
    where = f"s3://{faulty_s3.bucket}/{faulty_s3.prefix}"
    assert warnings[0] == (f"{where}: S3 GetObject failing (InternalError (HTTP 500)); retrying for up to 10s "
                           "(--retry-for)")
    assert warnings[1].startswith(f"{where}: S3 GetObject succeeded again after 6 failed attempts in ")
    assert len(warnings) == 2


def test_the_budget_ends_in_iofailure_saying_how_long(faulty_s3):
    warnings: list[str] = []
    store = _store(faulty_s3, warnings, retry_for_s=1.0)
    faulty_s3.proxy.fail(times=None, method="HEAD", status=503, code="ServiceUnavailable")
    started = time.monotonic()
    with pytest.raises(IOFailure) as info:
        store.size("k")
    elapsed = time.monotonic() - started
    # walctl's own clock is checked to the tenth below ("in 1."); the wall bound only rules out a
    # wait past the budget, with room for a loaded machine's scheduling (it failed at 3.28 s < 3)
    assert 1.0 <= elapsed < 6
    line = info.value.line()
    assert line.startswith("walctl: error: S3 HeadObject failed: 503 (HTTP 503)")  # (HEAD answers have no body)
    attempts = len(faulty_s3.proxy.seen("HEAD"))
    assert attempts > 5 and f"gave up after {attempts} attempts in 1." in line and "(--retry-for 1s)" in line
    assert info.value.attempts == attempts
    assert len(warnings) == 1 and "S3 HeadObject failing" in warnings[0]


def test_after_a_spent_budget_calls_make_one_attempt_until_one_gets_through(faulty_s3):
    """A failing command's clean-up calls (roll-back deletes, aborts) must not each wait a whole
    budget again: exit 6 comes within one --retry-for, not one per call."""
    warnings: list[str] = []
    store = _store(faulty_s3, warnings, retry_for_s=0.5)
    proxy = faulty_s3.proxy
    store.put("k", b"v")
    proxy.fail(times=None, method="GET")
    with pytest.raises(IOFailure):
        store.read_all("k")
    assert len(proxy.seen("GET")) > 1
    proxy.fail(times=None, method="DELETE")
    with pytest.raises(IOFailure) as info:
        store.delete("k")
    assert len(proxy.seen("DELETE")) == 1
    assert "gave up after 1 attempt, as an earlier request spent --retry-for on this endpoint" in info.value.line()
    proxy.clear()
    assert store.size("k") == 1  # through: the budget is back
    proxy.fail(times=2, method="GET")
    assert store.read_all("k") == b"v"
    assert len(proxy.seen("GET")) == 3


@pytest.mark.parametrize("status, code, error", [(403, "AccessDenied", IOFailure), (404, "NoSuchKey", NotFoundError),
                                                 (412, "PreconditionFailed", PreconditionFailed)])
def test_client_errors_are_never_retried(faulty_s3, status, code, error):
    warnings: list[str] = []
    store = _store(faulty_s3, warnings)
    faulty_s3.proxy.fail(times=None, status=status, code=code, method="PUT")
    with pytest.raises(error):
        store.put("k", b"v", if_absent=True)
    assert len(faulty_s3.proxy.seen("PUT")) == 1 and warnings == []


def test_create_only_put_whose_answer_was_lost_before_an_outage_is_success(faulty_s3):
    """The first PUT lands, its answer is lost, then 5 attempts fail (6 failures: past the quick
    5): the attempt that gets through sees 412 on our own object, which is success."""
    warnings: list[str] = []
    store = _store(faulty_s3, warnings)
    proxy = faulty_s3.proxy
    proxy.add("drop_after", method="PUT", times=1)
    proxy.fail(times=5, method="PUT")
    store.put("manifest/00000000000000000009.json", b"mine", if_absent=True)
    assert [(p.action, p.status) for p in proxy.seen("PUT")] == (
        [("drop_after", None)] + [("status", 500)] * 5 + [("forward", 412)])
    assert store.read_all("manifest/00000000000000000009.json") == b"mine"
    assert "S3 PutObject failing" in warnings[0]


def test_completed_upload_whose_answer_was_lost_before_an_outage_is_success(faulty_s3):
    warnings: list[str] = []
    store = _store(faulty_s3, warnings, multipart_threshold_bytes=6 * MiB)
    proxy = faulty_s3.proxy
    proxy.add("drop_after", method="POST", query="uploadId=", times=1)
    proxy.fail(times=5, method="POST", query="uploadId=")
    data = os.urandom(11 * MiB)
    store.put_large("big/done", data, part_size=5 * MiB)
    completes = proxy.seen("POST", query="uploadId=")
    assert [c.action for c in completes] == ["drop_after"] + ["status"] * 5 + ["forward"]
    # (moto completes a completed upload again, 200; S3 may answer NoSuchUpload, which the
    # attempts count makes a success after a size check)
    assert completes[-1].upstream_status in (200, 404)
    assert store.read_all("big/done") == data


def test_a_body_cut_short_again_and_again_is_read_within_the_budget(faulty_s3):
    warnings: list[str] = []
    store = _store(faulty_s3, warnings)
    data = os.urandom(200_000)
    store.put("cut", data)
    faulty_s3.proxy.add("truncate", method="GET", times=6)
    assert store.read_all("cut") == data
    gets = faulty_s3.proxy.seen("GET")
    assert [g.action for g in gets] == ["truncate"] * 6 + ["forward"]
    assert all(g.headers.get("if-match") for g in gets[1:])  # every retry pinned to the first ETag
    assert "S3 GetObject failing (answer cut short)" in warnings[0]
    assert "succeeded again after 6 failed attempts" in warnings[1]


def test_abort_after_a_spent_budget_is_one_attempt(faulty_s3):
    warnings: list[str] = []
    store = _store(faulty_s3, warnings, retry_for_s=0.5, multipart_threshold_bytes=6 * MiB)
    faulty_s3.proxy.fail(times=None, method="PUT", query="partNumber=1")
    faulty_s3.proxy.fail(times=None, method="DELETE", query="uploadId=")
    with pytest.raises(IOFailure) as info:
        store.put_large("big/stuck", os.urandom(7 * MiB), part_size=5 * MiB)
    assert "UploadPart failed" in info.value.line() and "could not be aborted" in info.value.line()
    assert len(faulty_s3.proxy.seen("DELETE", query="uploadId=")) == 1
    assert store.open_multipart_uploads() == ["big/stuck"]  # the fixture aborts it at teardown


def test_retry_for_zero_keeps_the_five_quick_attempts(faulty_s3):
    warnings: list[str] = []
    store = _store(faulty_s3, warnings, retry_for_s=0)
    faulty_s3.proxy.fail(times=None, method="GET")
    with pytest.raises(IOFailure) as info:
        store.read_all("k")
    assert len(faulty_s3.proxy.seen("GET")) == 5 and warnings == []
    assert "gave up after 5 attempts)" in info.value.line()
