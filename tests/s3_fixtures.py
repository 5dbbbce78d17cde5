"""S3 fixtures (imported by tests/conftest.py for every test directory): a moto S3 server over real HTTP (session scoped), a bucket per test,
local stores in tmp_path, and a fault-injecting HTTP proxy in front of moto.

The proxy forwards every request (method, path, query, headers, body) to moto and
relays the answer, unless a rule says otherwise: answer with an error status,
drop the connection before or after forwarding, or cut the response body short.
boto3 is never patched: faults cross the wire as real HTTP.
"""

from __future__ import annotations

import http.client
import logging
import os
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from urllib.parse import urlsplit

import pytest

from walctl.store import LocalStore, S3Store

# Credentials for moto only (it accepts any); a test that checks for leaks sets its own.
FAKE_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",   # never wait for an instance-metadata endpoint
}
# Variables that would point boto3 somewhere else than our server.
CLEARED_ENV = ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
               "AWS_CA_BUNDLE", "AWS_REQUEST_CHECKSUM_CALCULATION")

STORE_PREFIX = "walctl-test"


def share_botocore_data():
    """botocore's own data files (botocore/data, boto3/data: endpoints, the S3 model, its rule set)
    parsed, and their folders listed, once a process instead of once a client: each S3Store makes a boto3 session of its own,
    and a new session's loader parsed the same ~3.6 MB of JSON again (~70 ms of CPU a client, most
    of its creation). Within one session botocore already gives every client the same parsed
    objects; this gives them to every session. Files anywhere else (AWS_DATA_PATH) load as before.
    Returns the undo."""
    import boto3
    import botocore
    from botocore import loaders

    load = loaders.JSONFileLoader._load_file
    shipped = tuple(os.path.join(os.path.dirname(m.__file__), "data") + os.sep for m in (botocore, boto3))
    parsed: dict = {}

    def load_once(self, full_path, open_method):
        if not full_path.startswith(shipped):
            return load(self, full_path, open_method)
        if full_path not in parsed:
            parsed[full_path] = load(self, full_path, open_method)
        return parsed[full_path]

    # The services a loader finds: the listing of every service's folders (~56,000 stat calls a
    # loader), the same for every loader whose search path holds only botocore's and boto3's data.
    list_services = loaders.Loader.list_available_services
    listed: dict = {}

    def list_once(self, type_name):
        paths = tuple(self.search_paths)
        if not all((path + os.sep).startswith(shipped) or not os.path.isdir(path) for path in paths):
            return list_services(self, type_name)
        key = (paths, type_name)
        if key not in listed:
            listed[key] = list_services(self, type_name)
        return list(listed[key])

    loaders.JSONFileLoader._load_file = load_once
    loaders.Loader.list_available_services = list_once

    def undo() -> None:
        loaders.JSONFileLoader._load_file = load
        loaders.Loader.list_available_services = list_services

    return undo


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """Endpoint URL (``http://127.0.0.1:PORT``) of a moto S3 server running for the session.

    Fake credentials and an empty AWS config are put in os.environ for the
    session (and restored after it), so boto3 never reads the host's.
    """
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    config_dir = tmp_path_factory.mktemp("aws-config")
    env = dict(FAKE_ENV, AWS_CONFIG_FILE=str(config_dir / "config"),
               AWS_SHARED_CREDENTIALS_FILE=str(config_dir / "credentials"))
    saved = {name: os.environ.get(name) for name in (*env, *CLEARED_ENV)}
    os.environ.update(env)
    for name in CLEARED_ENV:
        os.environ.pop(name, None)
    undo_sharing = share_botocore_data()
    # port=0: the kernel picks a free port; get_host_and_port() reports it.
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()
        undo_sharing()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="session")
def s3_client(s3_server):
    """A plain boto3 client straight to moto (no proxy, no walctl): for set-up and checks."""
    import boto3
    from botocore.config import Config

    return boto3.session.Session().client(
        "s3", endpoint_url=s3_server, config=Config(retries={"mode": "standard", "max_attempts": 2}))


def _empty_bucket(client, bucket: str) -> None:
    for page in client.get_paginator("list_multipart_uploads").paginate(Bucket=bucket):
        for upload in page.get("Uploads", ()):
            client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys = [{"Key": obj["Key"]} for obj in page.get("Contents", ())]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys})


@pytest.fixture
def s3_bucket(s3_client):
    """A fresh, uniquely named bucket; emptied and removed after the test (moto keeps data in memory)."""
    name = f"walctl-{uuid.uuid4().hex[:20]}"
    s3_client.create_bucket(Bucket=name)
    yield name
    _empty_bucket(s3_client, name)
    s3_client.delete_bucket(Bucket=name)


@pytest.fixture
def s3_store(s3_server, s3_bucket):
    """An S3Store on a fresh bucket (under the prefix ``walctl-test``), talking to moto directly."""
    return S3Store(s3_bucket, STORE_PREFIX, endpoint_url=s3_server)


@pytest.fixture
def local_store(tmp_path):
    """A LocalStore in tmp_path (created by the store itself)."""
    return LocalStore(tmp_path / "store")


@pytest.fixture(params=["local", "s3"])
def store(request):
    """Each backend in turn, for tests of the interface's contract."""
    return request.getfixturevalue(f"{request.param}_store")


# -- the fault-injecting proxy --------------------------------------------------

# Headers that belong to one hop, not to the request (RFC 9110 7.6.1), plus
# Expect: the proxy has already answered "100 Continue" itself.
_HOP_HEADERS = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
                "trailer", "transfer-encoding", "upgrade", "expect", "content-length"}

_ERROR_CODES = {500: "InternalError", 503: "SlowDown", 403: "AccessDenied",
                409: "ConditionalRequestConflict", 404: "NoSuchKey", 412: "PreconditionFailed"}


@dataclass
class FaultRule:
    """Do ``action`` to the next ``times`` requests that match (``times=None``: every one).

    Actions: "status" (answer ``status`` with an S3 error body of ``code``),
    "drop" (close the connection without answering, request not forwarded),
    "drop_after" (forward, then close without relaying the answer),
    "truncate" (relay the status and headers but only half of the body).
    """

    action: str
    method: str | None = None
    path_contains: str | None = None
    query_contains: str | None = None
    times: int | None = 1
    status: int = 500
    code: str | None = None
    hits: int = 0

    def matches(self, method: str, path: str, query: str) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        if self.method is not None and self.method != method:
            return False
        if self.path_contains is not None and self.path_contains not in path:
            return False
        if self.query_contains is not None and self.query_contains not in query:
            return False
        return True


@dataclass
class ProxyEntry:
    """One request the proxy saw and what became of it."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body_bytes: int
    status: int | None = None      # what the client was sent (None: nothing)
    upstream_status: int | None = None
    action: str = "forward"


@dataclass
class FaultProxy:
    upstream: str
    rules: list[FaultRule] = field(default_factory=list)
    log: list[ProxyEntry] = field(default_factory=list)
    url: str = ""

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        parts = urlsplit(self.upstream)
        self._upstream_host, self._upstream_port = parts.hostname, parts.port

    def add(self, action: str, *, method: str | None = None, path: str | None = None,
            query: str | None = None, times: int | None = 1, status: int = 500,
            code: str | None = None) -> FaultRule:
        """Add a rule (see FaultRule); rules are tried in the order added."""
        rule = FaultRule(action, method, path, query, times, status, code)
        with self._lock:
            self.rules.append(rule)
        return rule

    def fail(self, times: int | None = 1, *, status: int = 500, code: str | None = None,
             method: str | None = None, path: str | None = None,
             query: str | None = None) -> FaultRule:
        """The next ``times`` matching requests get an S3 error ``status`` (500 InternalError by default)."""
        return self.add("status", method=method, path=path, query=query, times=times,
                        status=status, code=code)

    def clear(self) -> None:
        with self._lock:
            self.rules.clear()
            self.log.clear()

    def seen(self, method: str | None = None, *, query: str | None = None,
             path: str | None = None) -> list[ProxyEntry]:
        """Logged requests, filtered by method and query/path substrings."""
        with self._lock:
            entries = list(self.log)
        return [e for e in entries
                if (method is None or e.method == method)
                and (query is None or query in e.query)
                and (path is None or path in e.path)]

    def _pick(self, method: str, path: str, query: str, entry: ProxyEntry) -> FaultRule | None:
        with self._lock:
            self.log.append(entry)
            for rule in self.rules:
                if rule.matches(method, path, query):
                    rule.hits += 1
                    return rule
        return None

    def _forward(self, method: str, target: str, headers: list[tuple[str, str]],
                 body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(self._upstream_host, self._upstream_port, timeout=120)
        try:
            # Keep the client's Host header: it is part of the SigV4 signature.
            conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
            for name, value in headers:
                conn.putheader(name, value)
            if body or method in ("PUT", "POST"):
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body if body else None)
            resp = conn.getresponse()
            data = resp.read() if method != "HEAD" else b""
            return resp.status, resp.reason, list(resp.getheaders()), data
        finally:
            conn.close()


def _make_handler(proxy: FaultProxy):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"   # keep-alive, and "100 Continue" for Expect

        def log_message(self, format, *args):  # noqa: A002 - the base class's name
            pass

        def _read_body(self) -> bytes:
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                chunks = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
            length = int(self.headers.get("Content-Length", "0") or 0)
            return self.rfile.read(length) if length else b""

        def _send(self, status: int, headers: list[tuple[str, str]], body: bytes,
                  *, content_length: str | None = None, cut: bool = False) -> None:
            self.send_response_only(status)
            for name, value in headers:
                if name.lower() not in _HOP_HEADERS:
                    self.send_header(name, value)
            self.send_header("Content-Length",
                             content_length if content_length is not None else str(len(body)))
            if cut:
                self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body[:len(body) // 2] if cut else body)
            self.wfile.flush()
            if cut:
                self.close_connection = True

        def _handle(self) -> None:
            body = self._read_body()
            split = urlsplit(self.path)
            entry = ProxyEntry(self.command, split.path, split.query,
                               {k.lower(): v for k, v in self.headers.items()}, len(body))
            rule = proxy._pick(self.command, split.path, split.query, entry)
            action = rule.action if rule is not None else "forward"
            entry.action = action
            if action == "drop":
                self.close_connection = True
                return
            if action == "status":
                code = rule.code or _ERROR_CODES.get(rule.status, "InternalError")
                xml = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
                       f"<Message>injected by the walctl test proxy</Message>"
                       f"<RequestId>walctl-fault</RequestId></Error>").encode()
                entry.status = rule.status
                self._send(rule.status, [("Content-Type", "application/xml")], xml)
                return
            headers = [(k, v) for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS]
            try:
                status, _reason, resp_headers, data = proxy._forward(
                    self.command, self.path, headers, body)
            except OSError:
                entry.action = "upstream-error"
                entry.status = 502
                self._send(502, [], b"")
                return
            entry.upstream_status = status
            if action == "drop_after":
                self.close_connection = True
                return
            content_length = None
            if self.command == "HEAD":
                content_length = dict((k.lower(), v) for k, v in resp_headers).get("content-length", "0")
            entry.status = status
            self._send(status, resp_headers, data, content_length=content_length,
                       cut=(action == "truncate"))

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

    return Handler


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False   # idle keep-alive handlers must not hold up teardown


@pytest.fixture
def fault_proxy(s3_server):
    """A FaultProxy to the session's moto server, on a free port of 127.0.0.1."""
    proxy = FaultProxy(upstream=s3_server)
    server = _ProxyServer(("127.0.0.1", 0), _make_handler(proxy))
    proxy.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              name="walctl-fault-proxy", daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def faulty_s3(fault_proxy, s3_bucket, s3_client):
    """An S3Store whose endpoint is the fault proxy, with what a test needs around it.

    Attributes: ``store`` (default retries: 5 attempts), ``proxy``, ``bucket``,
    ``prefix``, ``client`` (plain boto3 straight to moto, for checks) and
    ``make_store(**kwargs)`` for a store with other S3Store knobs.
    """
    def make_store(**kwargs) -> S3Store:
        return S3Store(s3_bucket, STORE_PREFIX, endpoint_url=fault_proxy.url, **kwargs)

    return SimpleNamespace(store=make_store(), proxy=fault_proxy, bucket=s3_bucket,
                           prefix=STORE_PREFIX, client=s3_client, make_store=make_store)
