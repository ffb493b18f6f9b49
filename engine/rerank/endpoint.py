"""An OpenAI-compatible chat endpoint as a scorer: p from the "Yes" and "No" tokens among the
top 20 log-probabilities of the first token, 0 when neither is there (as INQUIRE's code does),
but a batch in which no photo's top 20 holds either, or a non-finite log-probability, is an
error. Failures raise `ScorerError` with one line, never a silent 0. The endpoint sees the photo's
earlier questions and its own answers as earlier turns of the conversation (docs/SPEC.md §2.2)."""

from __future__ import annotations

import base64
import io
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from engine.errors import BadImageError, BadInputError
from engine.models.chat import ChatError, chat_url, post_chat
from engine.rerank.answering import (
    ScorerError,
    answer_from,
    check_finite,
    check_lengths,
    check_some_yes_no,
    history_for,
    logsumexp,
    open_photo,
    question_text,
    spoken_answer,
    system_text,
    unreadable,
    yes_no_variants,
)
from engine.rerank.base import Answer, Photo, Question

if TYPE_CHECKING:
    from engine.progress import CancelToken

log = logging.getLogger(__name__)


def image_data_url(photo: Photo, max_side: int = 1024) -> str:
    """The photo as a base64 JPEG data URL, its longer side at most `max_side` pixels."""
    image = open_photo(photo, min_side=max_side)
    image.thumbnail((max_side, max_side))
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=90)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


class EndpointScorer:
    """An OpenAI-compatible chat-completions endpoint that returns log-probabilities (a
    llama.cpp or vLLM server, or a hosted one). Each (photo, question) is one request with
    `max_tokens: 1, logprobs: true, top_logprobs: 20`; `batch_size` requests run at once.
    Chaining: earlier questions and the model's answers are earlier turns of the messages."""

    TOP_LOGPROBS = 20

    def __init__(
        self,
        url: str,
        model: str = "",
        *,
        api_key: str = "",
        timeout: float = 60.0,
        batch_size: int = 4,
        max_side: int = 1024,
    ) -> None:
        if not url.strip():
            raise BadInputError("endpoint scorer: no URL given (endpoint:URL[#MODEL])")
        self.url = chat_url(url)
        self.model = model
        self.api_key = api_key
        self.timeout = timeout
        self.batch_size = max(1, batch_size)
        self.max_side = max_side
        self.identity = f"endpoint:{self.url}#{model}"
        self.seconds_per_call = 1.5

    def __repr__(self) -> str:
        return f"EndpointScorer({self.identity!r})"

    def messages(
        self,
        image_url: str,
        question: Question,
        history: Sequence[tuple[Question, Answer]],
        context: str,
        query: str = "",
    ) -> list[dict[str, Any]]:
        """The chat messages for one photo: system (with the original query when given), the
        photo with the first question, the earlier answers and questions in turn, the new
        question last."""
        out: list[dict[str, Any]] = [{"role": "system", "content": system_text(context, query)}]
        turns = [(q, spoken_answer(a)) for q, a in history] + [(question, None)]
        for i, (q, said) in enumerate(turns):
            if i == 0:
                content: Any = [
                    {"type": "image_url", "image_url": {"url": image_url}},
                    {"type": "text", "text": question_text(q)},
                ]
            else:
                content = question_text(q)
            out.append({"role": "user", "content": content})
            if said is not None:
                out.append({"role": "assistant", "content": said})
        return out

    def score(
        self,
        photos: Sequence[Photo],
        question: Question,
        *,
        history: Sequence[Sequence[tuple[Question, Answer]]] = (),
        context: str = "",
        cancel: CancelToken | None = None,
        query: str = "",
    ) -> list[Answer]:
        """One answer per photo (`query`, the original search, in the prompt when given); the
        first failed request raises `ScorerError` (one line), and so does a batch in which no
        photo's top 20 first tokens hold Yes or No."""
        check_lengths(photos, history)
        asked: set[int] = set()  # the photos sent (an unreadable one is not)

        def one(i: int) -> Answer:
            if cancel is not None:
                cancel.check()
            try:
                image_url = image_data_url(photos[i], self.max_side)
            except BadImageError as error:
                return unreadable(error)
            asked.add(i)
            messages = self.messages(image_url, question, history_for(history, i), context, query)
            body = {
                "model": self.model,
                "messages": messages,
                "max_tokens": 1,
                "temperature": 0,
                "logprobs": True,
                "top_logprobs": self.TOP_LOGPROBS,
            }
            return self._answer(self._post(body))

        with ThreadPoolExecutor(max_workers=min(self.batch_size, max(1, len(photos)))) as pool:
            answers = list(pool.map(one, range(len(photos))))
        sent = [answers[i] for i in sorted(asked)]
        check_some_yes_no(
            [a.l_yes is not None or a.l_no is not None for a in sent],
            f"endpoint scorer {self.url}#{self.model}",
            next((a.answer for a in sent if a.answer), ""),
        )
        return answers

    def _post(self, body: dict[str, Any]) -> Any:
        try:
            return post_chat(
                self.url,
                body,
                api_key=self.api_key,
                timeout=self.timeout,
                max_bytes=8 << 20,
                where=f"endpoint scorer: {self.url}",
            )
        except ChatError as error:
            raise ScorerError(str(error)) from error

    def _answer(self, reply: Any) -> Answer:
        """p from the first token's top log-probabilities (docs/SPEC.md §2; neither token -> 0)."""
        where = f"endpoint scorer: {self.url}"
        try:
            choice = reply["choices"][0]
            words = choice.get("message", {}).get("content") or ""
            logprobs = choice["logprobs"]
        except (KeyError, IndexError, TypeError, AttributeError) as error:
            raise ScorerError(f"{where}: the answer has no choices[0].logprobs") from error
        if logprobs is None:
            raise ScorerError(
                f"{where}: the answer has no log-probabilities (does the server support "
                "logprobs for this model?)"
            )
        try:
            first = logprobs["content"][0]
            top = first.get("top_logprobs") or [first]
            pairs = [(str(entry["token"]), float(entry["logprob"])) for entry in top]
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as error:
            raise ScorerError(
                f"{where}: malformed logprobs (expected content[0].top_logprobs)"
            ) from error
        check_finite(
            [lp for token, lp in pairs if yes_no_variants(token) is not None],
            f"endpoint scorer {self.url}#{self.model}",
        )
        yes = logsumexp([lp for token, lp in pairs if yes_no_variants(token) is True])
        no = logsumexp([lp for token, lp in pairs if yes_no_variants(token) is False])
        return answer_from(yes, no, " ".join(str(words).split())[:80])
