"""Prompt templates and LLM rewriting against a local OpenAI-compatible server."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from engine.visret.prompt import DEFAULT_TEMPLATE, TEMPLATES, render_prompt, rewrite_prompt


def test_templates_put_the_query_in_place():
    assert "{query}" in DEFAULT_TEMPLATE and DEFAULT_TEMPLATE in TEMPLATES.values()
    assert (
        render_prompt("a photo of {query}, outdoors", "  two  owls ")
        == "a photo of two owls, outdoors"
    )
    assert render_prompt("", "a fox") == DEFAULT_TEMPLATE.replace("{query}", "a fox")
    assert render_prompt("a drawing of", "a fox") == "a drawing of a fox"
    assert render_prompt("{query} {x}", "a {weird} fox") == "a {weird} fox {x}"


class Server:
    """A local chat-completions endpoint whose answer each test sets."""

    def __init__(self) -> None:
        self.reply: bytes = b""
        self.delay = 0.0
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server name
                length = int(self.headers["Content-Length"])
                server.requests.append(
                    {
                        "path": self.path,
                        "auth": self.headers.get("Authorization"),
                        "body": json.loads(self.rfile.read(length)),
                    }
                )
                time.sleep(server.delay)
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(server.reply)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up first (the timeout test)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def answer(self, content: str) -> None:
        self.reply = json.dumps({"choices": [{"message": {"content": content}}]}).encode()


@pytest.fixture
def server() -> Iterator[Server]:
    running = Server()
    thread = threading.Thread(target=running.httpd.serve_forever, daemon=True)
    thread.start()
    yield running
    running.httpd.shutdown()
    running.httpd.server_close()


def test_a_good_answer_becomes_the_prompt(server):
    server.answer('```json\n{"prompt": "a barn owl perched on a fence post at dusk"}\n```')
    result = rewrite_prompt("owl on a fence", "a photo of {query}", server.url, "llama", "secret")
    assert result.rewritten and result.note == ""
    assert result.prompt == "a barn owl perched on a fence post at dusk"
    sent = server.requests[0]
    assert sent["path"] == "/v1/chat/completions" and sent["auth"] == "Bearer secret"
    assert sent["body"]["model"] == "llama"
    assert json.loads(sent["body"]["messages"][1]["content"])["query"] == "owl on a fence"


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        (json.dumps({"choices": [{"message": {"content": "Sure! An owl on a fence."}}]}), "JSON"),
        (json.dumps({"choices": [{"message": {"content": '{"text": "x"}'}}]}), '"prompt"'),
        ("<html>bad gateway</html>", "did not answer JSON"),
        (json.dumps({"error": "model not loaded"}), "no choices"),
    ],
)
def test_a_bad_answer_falls_back_to_the_template_with_a_note(server, reply, why):
    server.reply = reply.encode()
    result = rewrite_prompt("owl on a fence", "a photo of {query}", server.url + "/v1", "m")
    assert not result.rewritten
    assert result.prompt == "a photo of owl on a fence"
    assert why in result.note and "\n" not in result.note


def test_a_slow_endpoint_times_out_and_falls_back(server):
    server.delay = 20.0
    server.answer('{"prompt": "too late"}')
    started = time.monotonic()
    result = rewrite_prompt("owl", "{query}", server.url, "m", timeout=0.3)
    assert time.monotonic() - started < 10  # the time limit, not the server's 20 s
    assert not result.rewritten and result.prompt == "owl"
    assert "did not answer within 0.3 s" in result.note


def test_a_refused_connection_falls_back(server):
    url = server.url
    server.httpd.shutdown()
    server.httpd.server_close()
    result = rewrite_prompt("owl", "{query}", url, "m", timeout=2)
    assert not result.rewritten and result.prompt == "owl"
    assert "cannot be reached" in result.note and "\n" not in result.note


def test_no_endpoint_means_the_template():
    result = rewrite_prompt("owl", "a photo of {query}", "", "m")
    assert (result.prompt, result.rewritten) == ("a photo of owl", False)
