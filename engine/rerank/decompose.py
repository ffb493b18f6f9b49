"""Where subqueries come from: the user's own list, a built-in rule set that needs no model,
or a language model behind an OpenAI-compatible endpoint (which falls back to the built-in
rules, with a one-line note, whenever it gives nothing usable)."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from typing import Any

from engine.models.chat import ChatError, chat_url, message_content, post_chat
from engine.rerank.base import Decomposition, Question

log = logging.getLogger(__name__)

MAX_QUESTIONS = 8

# Relation words between two objects, longest first so "to the left of" wins over "left of".
# Symmetric ones say nothing a per-object question misses; directional ones also keep the whole
# query as a question, so the direction is asked too.
_SYMMETRIC = ("next to", "beside", "alongside", "near", "and", "with")
_DIRECTIONAL = (
    "to the left of",
    "to the right of",
    "in front of",
    "on top of",
    "left of",
    "right of",
    "underneath",
    "behind",
    "above",
    "below",
    "under",
    "over",
    "on",
)
_RELATION = re.compile(
    r"^(?P<x>.+?)\s+(?P<rel>"
    + "|".join(re.escape(w).replace(r"\ ", r"\s+") for w in (*_DIRECTIONAL, *_SYMMETRIC))
    + r")\s+(?P<y>.+)$",
    re.IGNORECASE,
)
_ARTICLE = re.compile(r"^(?:a|an|the|one|some)\s+", re.IGNORECASE)
_ASKED = re.compile(
    r"^(?:is|are)\s+there\s+(?P<x>.+?)(?:\s+(?:in|on)\s+(?:this|the)\s+(?:image|photo|picture))?\s*\?*$",
    re.IGNORECASE,
)
_QUESTION_START = re.compile(
    r"^(?:is|are|does|do|did|can|could|has|have|was|were|will|would|which|what|how|who|where)\b",
    re.IGNORECASE,
)


def _clean(text: str) -> str:
    return " ".join(text.split()).strip(" .,;:!?")


def object_question(phrase: str, source: str) -> Question:
    """ "Is there a red circle in this image?" for the object `phrase`, with it as target."""
    target = _ARTICLE.sub("", _clean(phrase))
    article = "an" if target[:1].lower() in "aeiou" else "a"
    return Question(f"Is there {article} {target} in this image?", source, target)


def whole_question(query: str, source: str = "builtin") -> Question:
    """INQUIRE's baseline form of the whole query: "Does this image show …?"."""
    return Question(f"Does this image show {_clean(query)}?", source)


def question_target(text: str) -> str:
    """The object an "Is there X …?" question asks about ("" for any other question)."""
    match = _ASKED.match(_clean(text) + "?")
    return _ARTICLE.sub("", _clean(match.group("x"))) if match else ""


def split_relation(query: str) -> tuple[str, str, str] | None:
    """(first object, relation words, second object) when `query` relates two objects, else None.

    The first relation word from the left splits the query, so "a frog on a leaf beside a pond"
    splits at "on"; each side must hold a word of its own beyond articles."""
    match = _RELATION.match(_clean(query))
    if match is None:
        return None
    x, rel, y = (
        _clean(match.group("x")),
        " ".join(match.group("rel").lower().split()),
        _clean(match.group("y")),
    )
    if not _ARTICLE.sub("", x) or not _ARTICLE.sub("", y):
        return None
    return x, rel, y


def _name_pattern(name: str) -> re.Pattern[str]:
    words = [re.escape(w) for w in name.split()]
    # The last word may be plural: "red circles" names the "red circle".
    return re.compile(r"\b" + r"\s+".join(words) + r"(?:s|es)?\b", re.IGNORECASE)


def named_subject(query: str, known_names: Sequence[str]) -> str:
    """The longest catalog name (taxon or common name) the query mentions, or ""."""
    best = ""
    for name in known_names:
        name = " ".join(str(name).split())
        if len(name) > len(best) and len(name) >= 3 and _name_pattern(name).search(query):
            best = name
    return best


class UserDecomposer:
    """The user's own questions: a ";"-separated list. A bare phrase ("red circle") becomes
    "Is there a red circle in this image?" about that object."""

    identity = "user"

    def __init__(self, subqueries: str | Sequence[str]) -> None:
        parts = subqueries.split(";") if isinstance(subqueries, str) else list(subqueries)
        self.parts = [" ".join(p.split()) for p in parts if p.strip()]

    def decompose(
        self, query: str, *, context: str = "", known_names: Sequence[str] = ()
    ) -> Decomposition:
        """The user's questions, in the order written."""
        questions: list[Question] = []
        for part in self.parts[:MAX_QUESTIONS]:
            if part.endswith("?") or _QUESTION_START.match(part):
                text = part if part.endswith("?") else f"{part}?"
                questions.append(Question(text, "user", question_target(text)))
            else:
                questions.append(object_question(part, "user"))
        note = ""
        if len(self.parts) > MAX_QUESTIONS:
            note = f"kept the first {MAX_QUESTIONS} of {len(self.parts)} subqueries"
        return Decomposition(tuple(questions), context=context, note=note)


class BuiltinDecomposer:
    """Subqueries without a model. A relation between two objects ("X beside Y", "X above Y")
    gives one question per object (and, for a direction, the whole query last); any other query
    gives the whole query in INQUIRE's baseline form, preceded by a subject question when it
    names a taxon or common name of the catalog (identity first, then behaviour and context)."""

    identity = "builtin"

    def decompose(
        self, query: str, *, context: str = "", known_names: Sequence[str] = ()
    ) -> Decomposition:
        """The built-in questions for `query`."""
        text = _clean(query)
        if not text:
            return Decomposition((), context=context, note="the query is empty")
        relation = split_relation(text)
        if relation is not None:
            x, rel, y = relation
            questions = [object_question(x, "builtin"), object_question(y, "builtin")]
            if rel not in _SYMMETRIC:
                questions.append(whole_question(text))
            return Decomposition(tuple(questions), context=context)
        subject = named_subject(text, known_names)
        questions = [whole_question(text)]
        if subject and _clean(_ARTICLE.sub("", text)).lower() != subject.lower():
            questions.insert(0, object_question(subject, "builtin"))
        return Decomposition(tuple(questions), context=context)


class BaselineDecomposer:
    """INQUIRE's baseline protocol: no subqueries, the query itself asked once as "Does this
    image show …?", whose one-token yes/no answer ranks the photos."""

    identity = "baseline"

    def decompose(
        self, query: str, *, context: str = "", known_names: Sequence[str] = ()
    ) -> Decomposition:
        """The one whole-query question (`context` is kept only to be shown)."""
        text = _clean(query)
        if not text:
            return Decomposition((), context=context, note="the query is empty")
        return Decomposition((whole_question(text, "baseline"),), context=context)


LLM_INSTRUCTIONS = (
    "You turn a natural-world photo search query into 2 or 3 yes/no questions that a person "
    "could answer by looking at one photo alone (no location, date or metadata). Ask about the "
    "subject's identity first, then its behaviour, then its context or surroundings. Reply with "
    'JSON only: {"questions": [{"text": "Is there ...?", "target": "the object asked about, '
    'or empty for a whole-scene question"}]}.'
)
CONTEXT_INSTRUCTIONS = (
    "You are an expert naturalist. Write one short paragraph (at most 80 words) of expert "
    "context that helps someone judge from a photo alone whether it matches the query: what "
    "the subject looks like, how the behaviour or situation shows. Reply with JSON only: "
    '{"context": "..."}.'
)


class LlmFailed(Exception):
    """Why the language model gave nothing usable (one line)."""


class LlmDecomposer:
    """Subqueries written by a language model over an OpenAI-compatible chat endpoint. Any
    failure (refused, time-out, HTTP error, an answer that is not the JSON asked for) falls back
    to the built-in questions with a one-line note saying why."""

    def __init__(self, url: str, model: str = "", api_key: str = "", timeout: float = 30.0) -> None:
        self.url = url.strip()
        self.model = model
        self.api_key = api_key
        self.timeout = timeout
        self.identity = f"llm:{self.url}#{model}"
        self.fallback = BuiltinDecomposer()

    def decompose(
        self, query: str, *, context: str = "", known_names: Sequence[str] = ()
    ) -> Decomposition:
        """The model's questions, or the built-in ones with a note."""
        try:
            if not self.url:
                raise LlmFailed("no language-model endpoint is configured")
            user = {"query": _clean(query)}
            if context.strip():
                user["expert_context"] = context.strip()
            content = chat(self.url, self.model, self.api_key, LLM_INSTRUCTIONS, user, self.timeout)
            questions = _questions_from(content)
        except LlmFailed as failure:
            note = f"LLM subqueries failed ({failure}); used the built-in ones"
            log.info("%s", note)
            built = self.fallback.decompose(query, context=context, known_names=known_names)
            return Decomposition(built.questions, context=context, note=note)
        return Decomposition(questions, context=context)

    def draft_context(self, query: str) -> tuple[str, str]:
        """(an expert-context paragraph for `query`, "") or ("", a one-line note why not)."""
        try:
            if not self.url:
                raise LlmFailed("no language-model endpoint is configured")
            content = chat(
                self.url, self.model, self.api_key, CONTEXT_INSTRUCTIONS,
                {"query": _clean(query)}, self.timeout,
            )  # fmt: skip
            data = _json_content(content)
            text = data.get("context") if isinstance(data, dict) else None
            if not isinstance(text, str) or not text.strip():
                raise LlmFailed('the model\'s JSON has no "context" text')
        except LlmFailed as failure:
            return "", f"drafting the context failed ({failure})"
        return " ".join(text.split()), ""


def chat(
    endpoint: str, model: str, api_key: str, system: str, user: dict[str, Any], timeout: float
) -> str:
    """The message text a chat-completions endpoint answers; `LlmFailed` with one line on any
    failure (unreachable, time-out, HTTP error, no JSON, no message)."""
    body = {
        "model": model,
        "temperature": 0,
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": json.dumps(user)},
        ],
    }
    try:
        return message_content(
            post_chat(chat_url(endpoint), body, api_key=api_key, timeout=timeout)
        )
    except ChatError as error:
        raise LlmFailed(str(error)) from error


def _json_content(content: str) -> Any:
    text = content.strip()
    if text.startswith("```"):  # small local models fence their JSON
        text = text.strip("`").removeprefix("json").strip()
    try:
        return json.loads(text)
    except ValueError as error:
        raise LlmFailed("the model did not reply with the JSON asked for") from error


def _questions_from(content: str) -> tuple[Question, ...]:
    data = _json_content(content)
    items = data.get("questions") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise LlmFailed('the model\'s JSON has no "questions" list')
    questions: list[Question] = []
    for item in items[:MAX_QUESTIONS]:
        if isinstance(item, str):
            text, target = item, ""
        elif isinstance(item, dict) and isinstance(item.get("text"), str):
            text, target = item["text"], str(item.get("target") or "")
        else:
            raise LlmFailed("a question in the model's JSON is not text")
        text = " ".join(text.split())
        if text:
            questions.append(Question(text, "llm", _clean(target) or question_target(text)))
    if not questions:
        raise LlmFailed("the model gave no questions")
    return tuple(questions)
