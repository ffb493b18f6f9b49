"""The one client of OpenAI-compatible chat-completions endpoints (a local llama.cpp, Ollama or
vLLM server, or a hosted one): VisRet's prompt rewriting, the LLM decomposer and the endpoint
scorer of reranking all post through `post_chat`, so every failure reads the same: one line
naming the URL and what went wrong (unreachable, time-out, HTTP status with the server's own
message, a redirect, an answer too long or not JSON). The endpoint is not trusted: it gets a
time limit for the whole request, a size limit for its answer, no redirect is followed (the
key would go with it), and its words are cleaned of the key before anyone reads them."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from engine.errors import QuadratError, one_line


class ChatError(QuadratError):
    """The endpoint gave no usable answer; the message is one line."""


def chat_url(endpoint: str) -> str:
    """The chat-completions URL of `endpoint` (a server root, its /v1, or the full URL)."""
    url = endpoint.strip().rstrip("/")
    if url.endswith("/chat/completions"):
        return url
    if url.endswith("/v1"):
        return f"{url}/chat/completions"
    return f"{url}/v1/chat/completions"


def post_chat(
    url: str,
    body: dict[str, Any],
    *,
    api_key: str = "",
    timeout: float = 20.0,
    max_bytes: int = 1 << 20,
    where: str = "",
) -> Any:
    """POST `body` as JSON to the chat-completions `url` and return the parsed JSON answer.

    `timeout` bounds the whole request (connect, send, every byte of the answer), not each
    socket read, and an answer longer than `max_bytes` is refused. Redirects are never
    followed: an API endpoint has no reason to send a POST elsewhere, and following one would
    carry the key to another server. `where` names the caller in messages (default: the URL).
    Any failure -> `ChatError`, whose message never holds the key."""
    where = where or url
    try:
        return _post(url, body, api_key, timeout, max_bytes, where)
    except ChatError as error:
        # Servers echo what they were sent (an "invalid key sk-..." message, a Location
        # holding it); the key must not reach a dialog, a note or a log line.
        raise ChatError(_redact(str(error), api_key)) from error.__cause__


def _post(
    url: str, body: dict[str, Any], api_key: str, timeout: float, max_bytes: int, where: str
) -> Any:
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(
        url, data=json.dumps(body).encode("utf-8"), headers=headers, method="POST"
    )
    too_slow = f"{where} did not answer within {timeout:g} s (the time limit for one request)"
    deadline = _Deadline(timeout)
    opener = urllib.request.build_opener(
        _RefuseRedirects(), _WatchedHTTPHandler(deadline), _WatchedHTTPSHandler(deadline)
    )
    try:
        with opener.open(request, timeout=timeout) as response:
            raw = _read_answer(response, max_bytes, where)
    except urllib.error.HTTPError as error:
        if deadline.expired:
            raise ChatError(too_slow) from error
        if 300 <= error.code < 400:
            target = one_line(error.headers.get("Location") or "nowhere it named", 160)
            raise ChatError(
                f"{where} answered HTTP {error.code} redirecting to {target}; an API endpoint "
                "must not redirect, so nothing was sent there: set the endpoint to the URL "
                "that answers"
            ) from error
        raise ChatError(
            f"{where} answered HTTP {error.code} {error.reason}{_error_detail(error)}"
        ) from error
    except ChatError:
        raise
    except urllib.error.URLError as error:
        if deadline.expired or isinstance(error.reason, TimeoutError):
            raise ChatError(too_slow) from error
        raise ChatError(f"{where} cannot be reached ({one_line(error.reason)})") from error
    except (OSError, ValueError, http.client.HTTPException) as error:
        if deadline.expired or isinstance(error, TimeoutError):
            raise ChatError(too_slow) from error
        raise ChatError(f"{where}: {one_line(error)}") from error
    finally:
        deadline.stop()
    if deadline.expired:  # the watchdog cut the answer short: what arrived is not all of it
        raise ChatError(too_slow)
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise ChatError(f"{where} did not answer JSON") from error


def _read_answer(response: Any, max_bytes: int, where: str) -> bytes:
    """The answer's body, refused (`ChatError`) once it is longer than `max_bytes`."""
    too_big = (
        f"{where} answered more than {_size(max_bytes)}, the most one answer may be; "
        "ask the server for shorter answers"
    )
    length = response.headers.get("Content-Length")
    if length is not None and length.strip().isdigit() and int(length) > max_bytes:
        raise ChatError(too_big)  # said up front: nothing needs reading
    raw: bytes = response.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise ChatError(too_big)
    return raw


def _size(count: int) -> str:
    """`count` bytes in the unit a person reads (1 MiB, 8 MiB, 512 bytes)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return f"{count} bytes"


def _redact(text: str, secret: str) -> str:
    return text.replace(secret, "[API key]") if secret else text


class _Deadline:
    """A watchdog over one request: when `seconds` have passed it shuts the connection's
    socket, which ends any read in progress. Socket timeouts alone count per read, so a server
    sending a byte every few seconds would never be cut off."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds
        self.expired = False
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._timer = threading.Timer(max(0.0, seconds), self._expire)
        self._timer.daemon = True
        self._timer.start()

    def remaining(self) -> float:
        # Never 0: a socket with timeout 0 would be non-blocking instead of timing out.
        return max(0.001, self.end - time.monotonic())

    def socket_timeout(self, given: object) -> float:
        """The socket timeout for a connection: `given`, but never past the deadline."""
        remaining = self.remaining()
        return min(float(given), remaining) if isinstance(given, int | float) else remaining

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            late = self.expired
        if late:
            _shut(sock)

    def stop(self) -> None:
        self._timer.cancel()

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    # The plain socket's shutdown, also for a TLS socket: SSLSocket.shutdown would drop its
    # TLS state under the thread still reading it. An OSError: already closed, nothing to cut.
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _Watched:
    """Mixed into an HTTP(S) connection: the request's deadline can shut its socket."""

    sock: socket.socket

    def __init__(self, host: str, deadline: _Deadline, **kwargs: Any) -> None:
        kwargs["timeout"] = deadline.socket_timeout(kwargs.get("timeout"))
        super().__init__(host, **kwargs)  # type: ignore[call-arg]
        self.deadline = deadline

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        self.deadline.watch(self.sock)


class _WatchedHTTPConnection(_Watched, http.client.HTTPConnection):
    pass


class _WatchedHTTPSConnection(_Watched, http.client.HTTPSConnection):
    pass


def _connection_factory(
    kind: type[_WatchedHTTPConnection] | type[_WatchedHTTPSConnection], deadline: _Deadline
) -> Any:
    """What `AbstractHTTPHandler.do_open` calls to make a connection: one watched by `deadline`."""

    def connection(host: str, /, **kwargs: Any) -> http.client.HTTPConnection:
        return kind(host, deadline, **kwargs)

    return connection


class _WatchedHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self.deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_connection_factory(_WatchedHTTPConnection, self.deadline), req)


class _WatchedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self.deadline = deadline

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_connection_factory(_WatchedHTTPSConnection, self.deadline), req)


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """Follows no redirect: the 3xx reaches `post_chat` as an `HTTPError` to report."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def message_content(answer: Any) -> str:
    """The text of a chat-completions answer's first choice; `ChatError` when there is none."""
    try:
        content = answer["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as error:
        raise ChatError("the answer has no choices[0].message.content") from error
    if not isinstance(content, str):
        raise ChatError("the answer's message is not text")
    return content


def _error_detail(error: urllib.error.HTTPError) -> str:
    """The server's own error message, when its answer carries one (OpenAI's shape or text)."""
    try:
        body = error.read(2000).decode("utf-8", "replace")
    except (OSError, ValueError):
        return ""
    try:
        message = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = body
    text = one_line(message, 120) if str(message).strip() else ""
    return f": {text}" if text else ""
