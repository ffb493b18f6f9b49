"""Downloads from a hub that lies, served on 127.0.0.1: a length it does not send, a body cut
short, a sha256 of other bytes, a resume answered from the wrong offset, redirects to a local
file, a data: URL or round in a loop. Each ends in one line with nothing installed (or, where
the bytes were only cut short, a partial file the next honest answer resumes), never with a
file the hub did not vouch for installed as a model."""

from __future__ import annotations

import hashlib
import http.server
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from engine.errors import ModelLoadError
from engine.models.folders import CONFIG_NAME, WEIGHTS_NAME
from engine.models.store import ModelStore
from tests.test_models import (
    HUB_ID,
    HUB_SPEC,
    hub_files,
    tiny,  # noqa: F401 - the fixture
)

BASE = f"/{HUB_ID}/resolve/main"
WEIGHTS_PATH = f"{BASE}/{WEIGHTS_NAME}"


@dataclass
class Answer:
    """What the lying server does for one request."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    send: int | None = None  # bytes actually sent before the connection closes (None: all)


@dataclass
class LyingHub:
    """`lie(path, range_header)` -> an `Answer`, or None for the honest one."""

    files: dict[str, bytes]
    lie: Callable[[str, str | None], Answer | None]
    url: str = ""
    requests: list[str] = field(default_factory=list)

    def honest(self, path: str, wanted: str | None) -> Answer:
        body = self.files.get(path)
        if body is None:
            return Answer(404)
        etag = {"ETag": f'"{hashlib.sha256(body).hexdigest()}"'}
        if wanted:
            start = int(wanted.removeprefix("bytes=").split("-")[0])
            rest = body[start:]
            return Answer(206, {**etag, "Content-Range": f"bytes {start}-{len(body) - 1}/"
                                f"{len(body)}"}, rest)  # fmt: skip
        return Answer(200, etag, body)


def _handler(hub: LyingHub) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _answer(self, send_body: bool) -> None:
            path = self.path.split("?")[0]
            wanted = self.headers.get("Range")
            hub.requests.append(f"{self.command} {path} {wanted or ''}".strip())
            answer = hub.lie(path, wanted) or hub.honest(path, wanted)
            self.send_response(answer.status)
            headers = {"Content-Length": str(len(answer.body)), **answer.headers}
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Connection", "close")
            self.end_headers()
            if send_body:
                self.wfile.write(answer.body[: answer.send])
                self.wfile.flush()
            self.close_connection = True

        def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
            self._answer(send_body=False)

        def do_GET(self) -> None:  # noqa: N802
            self._answer(send_body=True)

    return Handler


@pytest.fixture
def lying() -> Iterator[Callable[..., LyingHub]]:
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(files: dict[str, bytes], lie: Callable[[str, str | None], Answer | None]) -> LyingHub:
        hub = LyingHub(files, lie)
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        hub.url = f"http://127.0.0.1:{server.server_address[1]}"
        return hub

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def model_bytes(tiny) -> bytes:  # noqa: F811 - the imported fixture
    """A small real open_clip model's weights (a safetensors file)."""
    return bytes(tiny[1])


def _fails_in_one_line(store: ModelStore, *words: str) -> str:
    with pytest.raises(ModelLoadError) as caught:
        store.download(HUB_SPEC)
    message = str(caught.value)
    assert "\n" not in message, message
    for word in words:
        assert word in message, message
    assert not store.is_installed(HUB_SPEC)
    return message


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_body_cut_short_of_its_length_is_kept_to_resume_then_finished_honestly(
    tmp_path: Path, lying, model_bytes
) -> None:
    weights = model_bytes
    cut = {"on": True}

    def lie(path: str, wanted: str | None) -> Answer | None:
        if path == WEIGHTS_PATH and cut["on"]:
            return Answer(200, {"ETag": f'"{_sha(weights)}"'}, weights, send=len(weights) // 3)
        return None

    hub = lying(hub_files(weights), lie)
    store = ModelStore(tmp_path / "store", endpoint=hub.url)
    _fails_in_one_line(store, "broke off")
    assert store.partial_bytes(HUB_SPEC) > 0  # what came is kept
    cut["on"] = False
    installed = store.download(HUB_SPEC)
    assert installed.path is not None
    assert (installed.path / WEIGHTS_NAME).read_bytes() == weights
    assert any(r.startswith(f"GET {WEIGHTS_PATH} bytes=") for r in hub.requests)  # resumed


@pytest.mark.parametrize("vouched", [True, False], ids=["with its sha256", "without"])
def test_a_shorter_body_than_the_file_is_never_installed(
    tmp_path: Path, lying, model_bytes, vouched: bool
) -> None:
    """The server says the short length itself: only the sha256, or the weights' own shape
    (a safetensors file whose tensors run past its end), can tell."""
    weights = model_bytes
    short = weights[: len(weights) // 2]
    etag = {"ETag": f'"{_sha(weights)}"'} if vouched else {}

    def lie(path: str, wanted: str | None) -> Answer | None:
        return Answer(200, etag, short) if path == WEIGHTS_PATH else None

    store = ModelStore(tmp_path / "store", endpoint=lying(hub_files(weights), lie).url)
    _fails_in_one_line(store, "damaged" if vouched else "not a whole safetensors file")


def test_a_sha256_of_other_bytes_is_refused(tmp_path: Path, lying, model_bytes) -> None:
    weights = model_bytes

    def lie(path: str, wanted: str | None) -> Answer | None:
        if path == WEIGHTS_PATH:
            return Answer(200, {"ETag": f'"{_sha(b"other bytes")}"'}, weights)
        return None

    store = ModelStore(tmp_path / "store", endpoint=lying(hub_files(weights), lie).url)
    _fails_in_one_line(store, "damaged")


def test_a_resume_answered_from_the_wrong_offset_is_not_spliced_in(
    tmp_path: Path, lying, model_bytes
) -> None:
    """Asked for the rest from byte N, the server says 206 but sends the file from its start
    (its Content-Range says so, or says nothing): never appended after the N bytes kept."""
    weights = model_bytes
    state = {"first": True}

    def lie(path: str, wanted: str | None) -> Answer | None:
        if path != WEIGHTS_PATH:
            return None
        if state["first"]:
            state["first"] = False
            return Answer(200, {}, weights, send=len(weights) // 4)  # cut: kept to resume
        if wanted:
            return Answer(206, {"Content-Range": f"bytes 0-{len(weights) - 1}/{len(weights)}"},
                          weights)  # fmt: skip
        return None

    store = ModelStore(tmp_path / "store", endpoint=lying(hub_files(weights), lie).url)
    _fails_in_one_line(store, "broke off")
    try:
        installed = store.download(HUB_SPEC)
    except ModelLoadError as error:
        assert "\n" not in str(error)
        assert not store.is_installed(HUB_SPEC)
    else:
        assert installed.path is not None
        assert (installed.path / WEIGHTS_NAME).read_bytes() == weights


@pytest.mark.parametrize("target", ["file", "data"])
def test_a_redirect_out_of_http_is_refused(tmp_path: Path, lying, model_bytes, target: str) -> None:
    """A hub sending the weights to a local file (or a data: URL) would have that installed
    as the model: only http and https are followed."""
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"not a model, and not the hub's to read")
    location = secret.as_uri() if target == "file" else "data:application/octet-stream,abc"

    def lie(path: str, wanted: str | None) -> Answer | None:
        if path.endswith((".safetensors", ".bin")):
            return Answer(302, {"Location": location})
        return None

    store = ModelStore(tmp_path / "store", endpoint=lying(hub_files(model_bytes), lie).url)
    message = _fails_in_one_line(store)
    assert "redirect" in message and ("file" in message or "data" in message), message


def test_a_redirect_loop_ends_in_one_line_after_a_few_requests(
    tmp_path: Path, lying, model_bytes
) -> None:
    def lie(path: str, wanted: str | None) -> Answer | None:
        if path.endswith((".safetensors", ".bin")):
            return Answer(302, {"Location": path})  # itself, for ever
        return None

    hub = lying(hub_files(model_bytes), lie)
    store = ModelStore(tmp_path / "store", endpoint=hub.url)
    _fails_in_one_line(store, "redirects")
    assert len([r for r in hub.requests if r.startswith("GET")]) <= 20  # a bounded loop


def test_a_config_that_is_no_config_is_one_line(tmp_path: Path, lying, model_bytes) -> None:
    def lie(path: str, wanted: str | None) -> Answer | None:
        if path == f"{BASE}/{CONFIG_NAME}":
            return Answer(200, {}, b"\x00\xff" * 1000)
        return None

    store = ModelStore(tmp_path / "store", endpoint=lying(hub_files(model_bytes), lie).url)
    _fails_in_one_line(store, CONFIG_NAME)
