"""Hostile and broken LLM endpoints, on real HTTP servers on loopback: a redirect never carries
the API key elsewhere nor brings back another server's answers, a server dripping its answer
is cut off at the whole-request time limit, an oversized answer is refused as such, and the
key never shows in a message or a log line. Every caller of the endpoint is checked: the
endpoint scorer, the LLM decomposer and VisRet's prompt rewriting."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.demo.scenes import DemoScene, draw_demo_scene
from engine.indexing.hashes import content_hash
from engine.models.chat import ChatError, post_chat
from engine.rerank.answering import ScorerError
from engine.rerank.base import Photo, Question
from engine.rerank.decompose import BuiltinDecomposer, LlmDecomposer
from engine.rerank.endpoint import EndpointScorer
from engine.visret.prompt import rewrite_prompt

KEY = "sk-test-7f3a9c1e5b"
QUERY = "water frogs in amplexus"
CALLERS = ("scorer", "decomposer", "prompt")

# One answer every caller would accept: log-probabilities for the scorer, and a message whose
# JSON holds both subqueries and a drawing prompt. A caller that ends up with it was fooled.
USABLE = json.dumps(
    {
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": json.dumps(
                        {
                            "questions": [{"text": "Is the other server in charge?"}],
                            "prompt": "whatever the other server wants drawn",
                        }
                    ),
                },
                "logprobs": {
                    "content": [
                        {
                            "token": "Yes",
                            "logprob": -0.01,
                            "top_logprobs": [{"token": "Yes", "logprob": -0.01}],
                        }
                    ]
                },
            }
        ]
    }
).encode()


class Origin:
    """An HTTP server on 127.0.0.1 that records every request and answers as `mode` says:
    "answer" (200 with `reply`), "redirect" (`status` to `location`), "drip-body" / "drip-head"
    (one byte per `gap` seconds, at most `drip_bytes`), "big" (`reply`, with or without a
    Content-Length) or "echo-key" (401 repeating the Authorization header, as some servers do)."""

    def __init__(self) -> None:
        self.mode = "answer"
        self.reply = USABLE
        self.status = 302
        self.location = ""
        self.gap = 0.25
        self.drip_bytes = 40
        self.send_length = True
        self.requests: list[dict[str, Any]] = []
        self.stop = threading.Event()
        origin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - the http.server name
                self._serve(b"")

            def do_POST(self) -> None:  # noqa: N802 - the http.server name
                self._serve(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

            def _serve(self, body: bytes) -> None:
                origin.requests.append(
                    {
                        "method": self.command,
                        "path": self.path,
                        "auth": self.headers.get("Authorization"),
                        "body": body,
                    }
                )
                # The client may hang up first: what the time-limit and size tests expect.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    origin.respond(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def respond(self, handler: BaseHTTPRequestHandler) -> None:
        if self.mode == "redirect":
            handler.send_response(self.status)
            handler.send_header("Location", self.location)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
        elif self.mode == "echo-key":
            said = handler.headers.get("Authorization", "")
            data = json.dumps({"error": {"message": f"Incorrect API key provided: {said}"}})
            handler.send_response(401)
            handler.send_header("Content-Type", "application/json")
            handler.end_headers()
            handler.wfile.write(data.encode())
        elif self.mode in ("drip-body", "drip-head"):
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
            if self.mode == "drip-body":
                handler.wfile.write(head)
                handler.wfile.flush()
            stream = (head if self.mode == "drip-head" else b"") + self.reply
            for byte in stream[: self.drip_bytes]:  # bounded: the test never hangs
                if self.stop.wait(self.gap):
                    return
                handler.wfile.write(bytes([byte]))
                handler.wfile.flush()
            handler.close_connection = True
        else:
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            if self.send_length:
                handler.send_header("Content-Length", str(len(self.reply)))
            handler.end_headers()
            handler.wfile.write(self.reply)


def _running() -> Iterator[Origin]:
    origin = Origin()
    thread = threading.Thread(target=origin.httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield origin
    origin.stop.set()
    origin.httpd.shutdown()
    origin.httpd.server_close()
    thread.join(5)


@pytest.fixture
def endpoint() -> Iterator[Origin]:
    """The server the user configured."""
    yield from _running()


@pytest.fixture
def elsewhere() -> Iterator[Origin]:
    """Another origin (another port): where a hostile endpoint would send us."""
    yield from _running()


@pytest.fixture
def photo(tmp_path: Path) -> Photo:
    path = tmp_path / "frog.png"
    draw_demo_scene(np.random.default_rng(3), DemoScene(("red circle",)))[0].save(path)
    return Photo(1, path, content_hash(path))


def _ask(caller: str, url: str, photo: Photo, timeout: float = 5.0) -> str:
    """Ask `url` through `caller` and return the one line it shows for the failure, after
    checking that it fell back (or raised) as for any other endpoint failure."""
    if caller == "scorer":
        scorer = EndpointScorer(url, "m", api_key=KEY, timeout=timeout)
        with pytest.raises(ScorerError) as caught:
            scorer.score([photo], Question("Is there a frog?"))
        message = str(caught.value)
    elif caller == "decomposer":
        got = LlmDecomposer(url, "m", KEY, timeout=timeout).decompose(QUERY)
        assert got.questions == BuiltinDecomposer().decompose(QUERY).questions
        assert "used the built-in ones" in got.note
        message = got.note
    else:
        rewrite = rewrite_prompt("owl", "a photo of {query}", url, "m", KEY, timeout=timeout)
        assert (rewrite.prompt, rewrite.rewritten) == ("a photo of owl", False)
        message = rewrite.note
    assert "\n" not in message and KEY not in message
    return message


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_to_another_server_is_refused_without_sending_it_the_key(
    endpoint: Origin,
    elsewhere: Origin,
    photo: Photo,
    caplog: pytest.LogCaptureFixture,
    caller: str,
    status: int,
) -> None:
    caplog.set_level(logging.DEBUG)
    endpoint.mode, endpoint.status = "redirect", status
    endpoint.location = f"{elsewhere.url}/v1/chat/completions"
    message = _ask(caller, endpoint.url, photo)
    assert elsewhere.requests == []  # neither the key nor the photo nor the query went there
    assert [r["auth"] for r in endpoint.requests] == [f"Bearer {KEY}"]
    assert f"{endpoint.url}/v1/chat/completions" in message  # the endpoint, named
    assert endpoint.location in message and f"HTTP {status}" in message  # where it sent us
    assert KEY not in caplog.text


@pytest.mark.parametrize("caller", CALLERS)
def test_a_redirect_within_the_same_server_is_not_followed_either(
    endpoint: Origin, photo: Photo, caller: str
) -> None:
    endpoint.mode, endpoint.status, endpoint.location = "redirect", 308, "/other/completions"
    message = _ask(caller, endpoint.url, photo)
    assert len(endpoint.requests) == 1 and "/other/completions" in message


@pytest.mark.parametrize("caller", CALLERS)
def test_an_answer_dripped_byte_by_byte_is_cut_off_at_the_request_time_limit(
    endpoint: Origin, photo: Photo, caller: str
) -> None:
    # One byte every 0.25 s: each read is far quicker than the limit, the whole is not.
    endpoint.mode = "drip-body"
    started = time.monotonic()
    message = _ask(caller, endpoint.url, photo, timeout=1.0)
    elapsed = time.monotonic() - started
    assert "did not answer within 1 s" in message and "time limit" in message
    assert elapsed < 5.0  # the drip alone lasts 10 s


def test_status_and_headers_dripped_byte_by_byte_are_cut_off_too(endpoint: Origin) -> None:
    endpoint.mode = "drip-head"
    started = time.monotonic()
    with pytest.raises(ChatError, match="did not answer within 1 s") as caught:
        post_chat(f"{endpoint.url}/v1/chat/completions", {}, api_key=KEY, timeout=1.0)
    assert time.monotonic() - started < 5.0  # the drip alone lasts 10 s
    assert endpoint.url in str(caught.value)


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize("send_length", [True, False], ids=["with-length", "without-length"])
def test_an_oversized_answer_says_it_was_over_the_limit(
    endpoint: Origin, photo: Photo, caller: str, send_length: bool
) -> None:
    limit = "8 MiB" if caller == "scorer" else "1 MiB"  # a photo's answer may be longer
    endpoint.send_length = send_length
    endpoint.reply = b" " * ((8 << 20) + 10) + USABLE  # valid JSON, but far too much of it
    message = _ask(caller, endpoint.url, photo)
    assert f"answered more than {limit}" in message
    assert "did not answer JSON" not in message


def test_an_answer_just_within_the_limit_is_read(endpoint: Origin) -> None:
    endpoint.reply = b" " * (4096 - len(USABLE)) + USABLE
    answer = post_chat(f"{endpoint.url}/v1/chat/completions", {}, max_bytes=4096)
    assert answer["choices"][0]["logprobs"]["content"][0]["token"] == "Yes"


@pytest.mark.parametrize("caller", CALLERS)
def test_the_key_a_server_echoes_back_is_never_shown_or_logged(
    endpoint: Origin, photo: Photo, caplog: pytest.LogCaptureFixture, caller: str
) -> None:
    caplog.set_level(logging.DEBUG)
    endpoint.mode = "echo-key"
    message = _ask(caller, endpoint.url, photo)  # checks the key is not in the message
    assert "HTTP 401" in message and "Incorrect API key provided" in message
    assert KEY not in caplog.text


def test_a_key_in_a_redirect_target_is_not_shown(endpoint: Origin, elsewhere: Origin) -> None:
    endpoint.mode = "redirect"
    endpoint.location = f"{elsewhere.url}/steal?key={KEY}"
    with pytest.raises(ChatError) as caught:
        post_chat(f"{endpoint.url}/v1/chat/completions", {}, api_key=KEY)
    assert KEY not in str(caught.value) and f"{elsewhere.url}/steal" in str(caught.value)
    assert elsewhere.requests == []
