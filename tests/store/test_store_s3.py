"""S3Store over real HTTP: what moto enforces, multipart uploads, and faults injected by a proxy.

Backoff between retries is botocore's (standard mode: up to 1, 2, 4, 8 s), so the
tests that exhaust retries use few attempts, except one that checks the default.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path

import pytest

from walctl.errors import IOFailure, NotFoundError, UsageError
from walctl.store import PreconditionFailed, S3Store, open_store

MiB = 1 << 20
REPO_ROOT = Path(__file__).resolve().parents[2]


def _full(faulty, key: str) -> str:
    return f"{faulty.prefix}/{key}"


def _no_object(faulty, key: str) -> bool:
    resp = faulty.client.list_objects_v2(Bucket=faulty.bucket, Prefix=_full(faulty, key))
    return resp.get("KeyCount", 0) == 0


def _open_uploads(faulty) -> list:
    return faulty.client.list_multipart_uploads(Bucket=faulty.bucket).get("Uploads", [])


# -- what moto enforces over HTTP ------------------------------------------------

def test_moto_enforces_if_none_match_over_http(faulty_s3):
    store, proxy = faulty_s3.store, faulty_s3.proxy
    store.put("manifest/00000000000000000001.json", b"one", if_absent=True)
    with pytest.raises(PreconditionFailed):
        store.put("manifest/00000000000000000001.json", b"two", if_absent=True)
    puts = proxy.seen("PUT")
    assert [p.headers.get("if-none-match") for p in puts] == ["*", "*"]
    assert [p.upstream_status for p in puts] == [200, 412]   # moto's answer, relayed unchanged
    body = faulty_s3.client.get_object(Bucket=faulty_s3.bucket,
                                       Key=_full(faulty_s3, "manifest/00000000000000000001.json"))
    assert body["Body"].read() == b"one"


def test_plain_put_sends_no_condition(faulty_s3):
    faulty_s3.store.put("k", b"v")
    assert "if-none-match" not in faulty_s3.proxy.seen("PUT")[0].headers


def test_ranges_go_on_the_wire(faulty_s3):
    store, proxy = faulty_s3.store, faulty_s3.proxy
    store.put("r", bytes(range(100)))
    assert store.read_range("r", 10, 20) == bytes(range(10, 20))
    assert store.read_tail("r", 7) == (bytes(range(93, 100)), 100)
    gets = proxy.seen("GET")
    assert [g.headers.get("range") for g in gets] == ["bytes=10-19", "bytes=-7"]
    assert [g.upstream_status for g in gets] == [206, 206]
    assert store.stats.ranged_gets == 2


def test_list_paginates(faulty_s3):
    store = faulty_s3.make_store(max_keys=3)
    keys = [f"obj/{i:03d}" for i in range(10)]
    for key in reversed(keys):
        store.put(key, key.encode())
    store.put("other/x", b"x")
    listed = store.list("obj/")
    assert [o.key for o in listed] == keys
    assert [o.size for o in listed] == [7] * 10
    assert store.stats.list == 4                     # ceil(10 / 3) pages
    list_requests = faulty_s3.proxy.seen("GET", query="list-type=2")
    assert len(list_requests) == 4
    assert sum("continuation-token=" in r.query for r in list_requests) == 3
    assert all("max-keys=3" in r.query for r in list_requests)


def test_prefix_isolates_stores(s3_server, s3_bucket):
    a = S3Store(s3_bucket, "tenant-a", endpoint_url=s3_server)
    b = S3Store(s3_bucket, "tenant-ab", endpoint_url=s3_server)
    root = S3Store(s3_bucket, endpoint_url=s3_server)
    a.put("k", b"a")
    b.put("k", b"b")
    assert [o.key for o in a.list()] == ["k"]
    assert a.read_all("k") == b"a"
    assert [o.key for o in root.list()] == ["tenant-a/k", "tenant-ab/k"]
    assert a.url == f"s3://{s3_bucket}/tenant-a" and root.url == f"s3://{s3_bucket}"


def test_missing_bucket_is_not_found(s3_server):
    store = S3Store("walctl-no-such-bucket", "p", endpoint_url=s3_server)
    with pytest.raises(NotFoundError) as info:
        store.read_all("k")
    assert "no such bucket" in info.value.line()


def test_aws_endpoint_url_is_honoured(faulty_s3, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", faulty_s3.proxy.url)
    store = S3Store(faulty_s3.bucket, faulty_s3.prefix)
    store.put("via-env", b"v")
    assert faulty_s3.proxy.seen("PUT", path="via-env")


def test_open_store_s3_url(s3_server, s3_bucket):
    store = open_store(f"s3://{s3_bucket}/some/prefix/", endpoint_url=s3_server)
    assert isinstance(store, S3Store)
    assert store.url == f"s3://{s3_bucket}/some/prefix"
    store.put("k", b"v")
    assert store.read_all("k") == b"v"


# -- multipart ---------------------------------------------------------------------

def test_put_large_70mib_uses_multipart(faulty_s3):
    store, proxy = faulty_s3.store, faulty_s3.proxy
    data = os.urandom(70 * MiB)
    store.put_large("big/70mib", data)
    parts = proxy.seen("PUT", query="partNumber=")
    assert len(parts) == 9                               # ceil(70 / 8)
    assert all(p.body_bytes >= 5 * MiB for p in parts)
    assert [p.body_bytes for p in parts] == [8 * MiB] * 8 + [6 * MiB]
    assert store.stats.multipart_parts == 9
    assert len(proxy.seen("POST", query="uploads")) == 1       # create
    assert len(proxy.seen("POST", query="uploadId=")) == 1     # complete
    assert [p for p in proxy.seen("PUT") if "partNumber=" not in p.query] == []
    head = faulty_s3.client.head_object(Bucket=faulty_s3.bucket, Key=_full(faulty_s3, "big/70mib"))
    assert head["ContentLength"] == 70 * MiB
    assert head["ETag"].strip('"').endswith("-9")
    assert hashlib.sha256(store.read_all("big/70mib")).digest() == hashlib.sha256(data).digest()
    assert store.stats.bytes_written == 70 * MiB
    assert _open_uploads(faulty_s3) == []


def test_put_large_stream_with_odd_chunks(faulty_s3):
    store = faulty_s3.make_store(multipart_threshold_bytes=6 * MiB)
    data = os.urandom(13 * MiB + 123)
    chunks = (data[i:i + 777_777] for i in range(0, len(data), 777_777))
    store.put_large("big/stream", chunks, part_size=5 * MiB)
    parts = faulty_s3.proxy.seen("PUT", query="partNumber=")
    assert [p.body_bytes for p in parts] == [5 * MiB, 5 * MiB, 3 * MiB + 123]
    assert store.read_all("big/stream") == data


def test_put_large_stream_below_threshold_is_one_put(faulty_s3):
    store = faulty_s3.make_store(multipart_threshold_bytes=6 * MiB)
    data = os.urandom(6 * MiB)
    store.put_large("big/one", (data[i:i + MiB] for i in range(0, len(data), MiB)))
    assert faulty_s3.proxy.seen("PUT", query="partNumber=") == []
    assert len(faulty_s3.proxy.seen("PUT")) == 1
    assert store.read_all("big/one") == data


def test_failed_part_aborts_the_upload(faulty_s3):
    store = faulty_s3.make_store(multipart_threshold_bytes=6 * MiB, max_attempts=3)
    faulty_s3.proxy.fail(times=None, method="PUT", query="partNumber=2")
    with pytest.raises(IOFailure) as info:
        store.put_large("big/failed", os.urandom(12 * MiB), part_size=5 * MiB)
    assert info.value.exit_code == 6
    assert "UploadPart" in info.value.line() and "big/failed" in info.value.line()
    assert len(faulty_s3.proxy.seen("PUT", query="partNumber=2")) == 3   # every attempt
    assert faulty_s3.proxy.seen("PUT", query="partNumber=3") == []
    aborts = faulty_s3.proxy.seen("DELETE", query="uploadId=")
    assert len(aborts) == 1 and aborts[0].upstream_status == 204
    assert _open_uploads(faulty_s3) == []
    assert store.open_multipart_uploads() == []
    assert _no_object(faulty_s3, "big/failed")


def test_failed_abort_is_reported(faulty_s3):
    store = faulty_s3.make_store(multipart_threshold_bytes=6 * MiB, max_attempts=2)
    faulty_s3.proxy.fail(times=None, method="PUT", query="partNumber=1")
    faulty_s3.proxy.fail(times=None, method="DELETE", query="uploadId=")
    with pytest.raises(IOFailure) as info:
        store.put_large("big/stuck", os.urandom(7 * MiB), part_size=5 * MiB)
    assert "could not be aborted" in info.value.line()
    assert "AbortIncompleteMultipartUpload" in info.value.line()
    assert store.open_multipart_uploads() == ["big/stuck"]   # the fixture aborts it at teardown


def test_a_failure_in_the_data_source_aborts(faulty_s3):
    store = faulty_s3.make_store(multipart_threshold_bytes=6 * MiB)

    def chunks():
        yield os.urandom(11 * MiB)
        raise RuntimeError("source broke")

    with pytest.raises(RuntimeError, match="source broke"):
        store.put_large("big/source", chunks(), part_size=5 * MiB)
    assert len(faulty_s3.proxy.seen("DELETE", query="uploadId=")) == 1
    assert _open_uploads(faulty_s3) == []
    assert _no_object(faulty_s3, "big/source")


# -- retries and faults --------------------------------------------------------------

def test_transient_500s_are_retried(faulty_s3):
    store, proxy = faulty_s3.store, faulty_s3.proxy
    proxy.fail(times=2, method="PUT")
    store.put("retry/put", b"payload")
    puts = proxy.seen("PUT")
    assert [p.status for p in puts] == [500, 500, 200]
    assert store.stats.put == 3 and store.stats.retries == 2
    assert store.read_all("retry/put") == b"payload"


def test_slowdown_503_is_retried(faulty_s3):
    store, proxy = faulty_s3.store, faulty_s3.proxy
    store.put("retry/get", b"payload")
    proxy.fail(times=1, status=503, code="SlowDown", method="GET")
    assert store.read_all("retry/get") == b"payload"
    assert [g.status for g in proxy.seen("GET")] == [503, 200]
    assert store.stats.get == 2 and store.stats.retries == 1


def test_dropped_connection_is_retried(faulty_s3):
    store, proxy = faulty_s3.store, faulty_s3.proxy
    store.put("retry/drop", b"payload")
    proxy.add("drop", method="GET", times=1)
    assert store.read_range("retry/drop", 1, 4) == b"ayl"
    gets = proxy.seen("GET")
    assert [g.action for g in gets] == ["drop", "forward"]
    assert gets[0].status is None
    assert store.stats.retries == 1


def test_truncated_body_is_read_again(faulty_s3):
    store, proxy = faulty_s3.store, faulty_s3.proxy
    data = os.urandom(300_000)
    store.put("retry/cut", data)
    proxy.add("truncate", method="GET", times=1)
    assert store.read_all("retry/cut") == data
    gets = proxy.seen("GET")
    assert [g.action for g in gets] == ["truncate", "forward"]
    assert gets[1].headers.get("if-match")          # the retry is pinned to the same ETag
    assert store.stats.retries == 1


def test_lost_response_to_create_only_put_is_success(faulty_s3):
    # The first PUT lands but its answer is lost; the retry sees 412 on our own object.
    store, proxy = faulty_s3.store, faulty_s3.proxy
    proxy.add("drop_after", method="PUT", times=1)
    store.put("manifest/00000000000000000007.json", b"mine", if_absent=True)
    assert [(p.upstream_status, p.action) for p in proxy.seen("PUT")] == [
        (200, "drop_after"), (412, "forward")]
    assert store.read_all("manifest/00000000000000000007.json") == b"mine"
    # ...while someone else's object under the key is still a lost race.
    proxy.add("drop", method="PUT", times=1)
    with pytest.raises(PreconditionFailed):
        store.put("manifest/00000000000000000007.json", b"theirs", if_absent=True)


def test_persistent_500_is_iofailure_without_secrets(faulty_s3, monkeypatch):
    key_id, secret, token = "AKIAWALCTLLEAKCHECK01", "walctl/Secret+Key/DoNotLeak0123456789", "SessTokLeak42"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("AWS_SESSION_TOKEN", token)
    store = faulty_s3.make_store()      # the defaults: standard retries, 5 attempts
    faulty_s3.proxy.fail(times=None, method="GET")
    with pytest.raises(IOFailure) as info:
        store.read_all("obj/k")
    err = info.value
    assert err.exit_code == 6
    assert len(faulty_s3.proxy.seen("GET")) == 5
    assert store.stats.get == 5 and store.stats.retries == 4
    line = err.line()
    assert line.startswith("walctl: error: S3 GetObject failed: InternalError (HTTP 500)")
    assert f"s3://{faulty_s3.bucket}/{faulty_s3.prefix}/obj/k" in line
    assert "5 attempts" in line
    assert isinstance(err.__cause__, Exception)        # raised "from" botocore's error
    everything = line + json.dumps(err.to_json()) + "".join(traceback.format_exception(err))
    for secret_text in (key_id, secret, token):
        assert secret_text not in everything


def test_access_denied_is_iofailure_not_retried(faulty_s3):
    faulty_s3.proxy.fail(times=None, status=403, code="AccessDenied")
    with pytest.raises(IOFailure) as info:
        faulty_s3.store.put("k", b"v")
    assert info.value.exit_code == 6
    assert "(access denied)" in info.value.line()
    assert len(faulty_s3.proxy.seen("PUT")) == 1


def test_conditional_conflict_409_is_precondition_failed(faulty_s3):
    faulty_s3.proxy.fail(times=1, status=409, code="ConditionalRequestConflict", method="PUT")
    with pytest.raises(PreconditionFailed) as info:
        faulty_s3.store.put("manifest/00000000000000000003.json", b"v", if_absent=True)
    assert info.value.exit_code == 5


def test_connection_refused_is_iofailure(s3_bucket):
    import socket

    with socket.socket() as sock:  # a port nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    store = S3Store(s3_bucket, endpoint_url=f"http://user:hunter2@127.0.0.1:{port}", max_attempts=2)
    with pytest.raises(IOFailure) as info:
        store.size("k")
    assert "network error" in info.value.line()
    assert f"127.0.0.1:{port}" in info.value.line()
    assert "hunter2" not in info.value.line()


# -- packaging -------------------------------------------------------------------------

def test_boto3_is_not_imported_until_a_request(tmp_path):
    script = (
        "import sys\n"
        "from walctl.cli import main\n"
        "sys.argv = ['walctl', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "from walctl.store import open_store\n"
        "open_store('s3://bucket/prefix')\n"
        f"open_store({str(tmp_path / 'local')!r}).put('k', b'v')\n"
        "print('BOTO3', 'boto3' in sys.modules, 'botocore' in sys.modules, file=sys.stderr)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=60, cwd=tmp_path)
    assert "BOTO3 False False" in proc.stderr, proc.stderr


def test_bad_s3_urls(s3_server):
    with pytest.raises(UsageError):
        open_store("s3://")
    with pytest.raises(UsageError):
        open_store("s3:///prefix")
    with pytest.raises(UsageError):
        open_store("s3://bucket/a/../b")


@pytest.mark.parametrize("sizes, part_size", [
    ([], 4), ([3], 4), ([4], 4), ([9], 4), ([1, 1, 1, 1, 1], 4), ([2, 7, 0, 3, 8], 4), ([16], 4)])
def test_split_parts_cuts_exact_parts(sizes, part_size):
    from walctl.store.multipart import _split_parts

    data = bytes(range(sum(sizes)))
    chunks, pos = [], 0
    for size in sizes:
        chunks.append(data[pos:pos + size])
        pos += size
    parts = list(_split_parts(chunks, part_size))
    assert b"".join(parts) == data
    assert all(len(p) == part_size for p in parts[:-1])
    assert all(parts)
