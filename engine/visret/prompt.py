"""The prompt a generator draws: a template around the query, optionally rewritten by an LLM.

Templates are plain text with ``{query}`` where the query goes (our defaults live in
resources/visret/prompts.json). Two ways to have an OpenAI-compatible chat endpoint (a local
llama.cpp, Ollama or vLLM server, or a hosted one) write the prompt:

- `paper_prompt`, the VisRet paper's "T2I instruction": the model rephrases the query with a
  little more detail on the main subject's appearance, posture and actions (at most 30 words,
  plain text, one user message at temperature 0), and the answer is drawn inside the paper's
  Stable Diffusion prompt, "A small and realistic image of the ...". The instruction's wording
  is ours; what it asks for follows the paper's published code.
- `rewrite_prompt`, Quadrat's own: the model gets the query and the template's prompt as JSON and
  answers ``{"prompt": ...}``, asked to keep every detail of the query and add no subject.

On any failure both return the plain template's prompt with a one-line note saying what failed,
so a search never stops for the rewriter.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from engine.models.chat import ChatError, chat_url, message_content, post_chat

log = logging.getLogger(__name__)

PLACEHOLDER = "{query}"
MAX_PROMPT_CHARS = 400  # CLIP text towers read 77 tokens; a longer answer is cut, not refused


def _load_prompts() -> dict[str, Any]:
    text = resources.files("resources.visret").joinpath("prompts.json").read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


_PROMPTS = _load_prompts()
DEFAULT_TEMPLATE: str = str(_PROMPTS["default"])
TEMPLATES: dict[str, str] = {str(t["name"]): str(t["template"]) for t in _PROMPTS["templates"]}
REWRITE_INSTRUCTIONS: str = str(_PROMPTS["rewrite_instructions"])
PAPER_TEMPLATE: str = str(_PROMPTS["paper_template"])
T2I_INSTRUCTION: str = str(_PROMPTS["t2i_instruction"])
PAPER_MAX_TOKENS = 300  # the paper's limit on the rephrasing answer


@dataclass(frozen=True)
class PromptRewrite:
    """The prompt to draw, whether an LLM wrote it, and why not when it did not."""

    prompt: str
    rewritten: bool
    note: str = ""  # one line: why the plain template was used


def render_prompt(template: str, query: str) -> str:
    """`template` with `query` in place of ``{query}`` (added at the end when the template
    has no placeholder; the default template when it is empty). Other braces are kept as
    typed, so a query or template holding ``{`` cannot break it."""
    chosen = template.strip() or DEFAULT_TEMPLATE
    words = " ".join(query.split())
    text = chosen.replace(PLACEHOLDER, words) if PLACEHOLDER in chosen else f"{chosen} {words}"
    return " ".join(text.split())


def rewrite_prompt(
    query: str,
    template: str,
    endpoint: str,
    model: str,
    api_key: str = "",
    timeout: float = 20.0,
) -> PromptRewrite:
    """Ask the OpenAI-compatible `endpoint` to write the drawing prompt for `query`.

    Any failure (no endpoint, refused, timeout, HTTP error, an answer that is not the JSON
    asked for) returns `render_prompt(template, query)` with `rewritten=False` and a note.
    """
    plain = render_prompt(template, query)
    if not endpoint.strip():
        return PromptRewrite(plain, False, "prompt rewriting is off (no endpoint set)")
    url = chat_url(endpoint)
    try:
        answer = _ask(url, query, plain, model, api_key, timeout)
        prompt = _prompt_from(answer)
    except _RewriteFailed as failure:
        note = f"prompt rewriting failed ({failure}); drew the plain template"
        log.info("%s: %s", url, note)
        return PromptRewrite(plain, False, note)
    return PromptRewrite(prompt, True)


class _RewriteFailed(Exception):
    """Why the endpoint gave no usable prompt (one line)."""


def _ask(url: str, query: str, plain: str, model: str, api_key: str, timeout: float) -> Any:
    body = {
        "model": model,
        "temperature": 0,
        "messages": [
            {"role": "system", "content": REWRITE_INSTRUCTIONS},
            {"role": "user", "content": json.dumps({"query": query, "template_prompt": plain})},
        ],
    }
    try:
        return post_chat(url, body, api_key=api_key, timeout=timeout)
    except ChatError as error:
        raise _RewriteFailed(str(error)) from error


def _prompt_from(answer: Any) -> str:
    """The prompt inside a chat-completions answer whose message is ``{"prompt": "..."}``
    (a fenced code block around it is tolerated: small local models add one)."""
    try:
        content = message_content(answer)
    except ChatError as error:
        raise _RewriteFailed(str(error)) from error
    text = content.strip()
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    try:
        data = json.loads(text)
    except ValueError as error:
        raise _RewriteFailed('the model did not reply with {"prompt": ...} JSON') from error
    prompt = data.get("prompt") if isinstance(data, dict) else None
    if not isinstance(prompt, str) or not prompt.strip():
        raise _RewriteFailed('the model\'s JSON has no "prompt" text')
    return " ".join(prompt.split())[:MAX_PROMPT_CHARS]


def paper_prompt(
    query: str,
    template: str,
    endpoint: str,
    model: str,
    api_key: str = "",
    timeout: float = 20.0,
    plain_template: str = "",
) -> PromptRewrite:
    """The VisRet paper's prompting: the endpoint rephrases `query` as the T2I instruction asks,
    and the answer goes into `template` (the paper's, "A small and realistic image of the
    {query}", when empty).

    Any failure returns `render_prompt(plain_template, query)` with `rewritten=False` and a note,
    the prompt a search without a language model draws.
    """
    plain = render_prompt(plain_template, query)
    if not endpoint.strip():
        return PromptRewrite(plain, False, "prompt rewriting is off (no endpoint set)")
    url = chat_url(endpoint)
    body = {
        "model": model,
        "temperature": 0,
        "max_tokens": PAPER_MAX_TOKENS,
        "messages": [
            {
                "role": "user",
                "content": T2I_INSTRUCTION.replace(PLACEHOLDER, " ".join(query.split())),
            }
        ],
    }
    try:
        try:
            answer = post_chat(url, body, api_key=api_key, timeout=timeout)
            rephrased = _rephrased_from(message_content(answer))
        except ChatError as error:
            raise _RewriteFailed(str(error)) from error
    except _RewriteFailed as failure:
        note = f"prompt rewriting failed ({failure}); drew the plain template"
        log.info("%s: %s", url, note)
        return PromptRewrite(plain, False, note)
    prompt = render_prompt(template.strip() or PAPER_TEMPLATE, rephrased)
    return PromptRewrite(prompt[:MAX_PROMPT_CHARS], True)


_THINKING = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"^```[A-Za-z]*\s*|\s*```$")
_LABEL = re.compile(r"^\s*(rephrased query|query|prompt)\s*:\s*", re.IGNORECASE)


def _rephrased_from(content: str) -> str:
    """The rephrased query in a plain-text answer: a reasoning model's <think> block, a
    "Rephrased query:" label, a code fence and surrounding quotes are dropped, since small local
    models add them."""
    text = _FENCE.sub("", _THINKING.sub("", content).strip())
    text = _LABEL.sub("", text).strip().strip("\"'").strip()
    text = " ".join(text.split())
    if not text:
        raise _RewriteFailed("the model's answer was empty")
    return text
