"""The one client of OpenAI-compatible chat-completions endpoints (a local llama.cpp, Ollama or
vLLM server, or a hosted one): VisRet's prompt rewriting, the LLM decomposer and the endpoint
scorer of reranking all post through `post_chat`, so every failure reads the same: one line
naming the URL and what went wrong (unreachable, time-out, HTTP status with the server's own
message, an answer that is not JSON)."""

from __future__ import annotations

import json
import socket
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

    `where` names the caller in messages (default: the URL). Any failure -> `ChatError`."""
    where = where or url
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(
        url, data=json.dumps(body).encode("utf-8"), headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read(max_bytes)
    except urllib.error.HTTPError as error:
        raise ChatError(
            f"{where} answered HTTP {error.code} {error.reason}{_error_detail(error)}"
        ) from error
    except TimeoutError as error:
        raise ChatError(f"{where} did not answer within {timeout:g} s") from error
    except urllib.error.URLError as error:
        if isinstance(error.reason, TimeoutError | socket.timeout):
            raise ChatError(f"{where} did not answer within {timeout:g} s") from error
        raise ChatError(f"{where} cannot be reached ({one_line(error.reason)})") from error
    except (OSError, ValueError) as error:
        raise ChatError(f"{where}: {one_line(error)}") from error
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise ChatError(f"{where} did not answer JSON") from error


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
