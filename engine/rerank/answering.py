"""What every scorer shares: opening a photo, replaying a photo's earlier answers, the
language-model scorers' prompt parts, and turning "Yes" and "No" logits into an `Answer`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from PIL import Image

from engine.errors import BadImageError, QuadratError, one_line
from engine.indexing.decode import decode_image
from engine.rerank.base import Answer, Photo, Question, yes_probability

# The system instruction every language-model scorer gets, before the expert context.
YES_NO_INSTRUCTION = (
    "You are looking at one photo. Answer each question about it with a single word: Yes or No."
)
# INQUIRE's instruction after the question for models prompted without a chat template.
RESPOND_YES_NO = "Respond with yes or no."


class ScorerError(QuadratError):
    """A scorer could not answer (endpoint unreachable, time-out, HTTP error, malformed
    answer, a model that cannot be loaded); the message is one line."""


def check_lengths(photos: Sequence[Photo], history: Sequence[Sequence[Any]]) -> None:
    if history and len(history) != len(photos):
        raise ValueError(f"{len(history)} histories for {len(photos)} photos")


def history_for(history: Sequence[Sequence[tuple[Question, Answer]]], i: int) -> list[Any]:
    return list(history[i]) if history else []


def spoken_answer(answer: Answer) -> str:
    """How an earlier answer is replayed in a chained prompt: "Yes" or "No"."""
    return "Yes" if answer.p_yes >= 0.5 else "No"


def open_photo(photo: Photo, min_side: int | None = None) -> Image.Image:
    """The photo as an upright RGB image (BadImageError with a reason when it cannot be read)."""
    return decode_image(photo.path, min_side=min_side).image


def unreadable(error: BadImageError) -> Answer:
    # A photo that cannot be read answers "no", and says why where the answer is shown.
    return Answer(0.0, f"unreadable photo: {one_line(error)}")


def question_text(question: Question) -> str:
    return " ".join(question.text.split())


def query_line(query: str) -> str:
    """The original search in the answering prompt (Divide-and-Conquer), "" for none."""
    query = " ".join(query.split())
    return f'The photos are searched for: "{query}".' if query else ""


def system_text(context: str, query: str = "") -> str:
    """The system turn: the yes/no instruction, the expert context, the original query."""
    parts = [YES_NO_INSTRUCTION, " ".join(context.split()), query_line(query)]
    return "\n\n".join(part for part in parts if part)


def no_template_prompt(
    question: Question,
    history: Sequence[tuple[Question, Answer]],
    context: str,
    query: str = "",
) -> str:
    """The text for a model without a chat template (PaliGemma): INQUIRE's
    "Q: ...? Respond with yes or no." with the context, the query and earlier answers as
    lines before it. The image tokens and BOS go in front and a newline after (the processor's
    layout), so the image placeholder is not part of this text."""
    lines = [" ".join(context.split()), query_line(query)]
    lines += [f"Q: {question_text(q)} A: {spoken_answer(a)}" for q, a in history]
    lines.append(f"Q: {question_text(question)} {RESPOND_YES_NO}")
    return "\n".join(line for line in lines if line)


def check_finite(values: Sequence[float], where: str) -> None:
    """A NaN or infinite Yes/No logit is a broken model or the wrong numerics, never a "no"."""
    if not all(math.isfinite(v) for v in values):
        raise ScorerError(
            f"{where}: the Yes/No logits are not finite (NaN or inf); load the model in "
            "bf16 or fp32 (fp16 overflows in models trained in bf16), or use another model"
        )


def check_some_yes_no(held: Sequence[bool], where: str, began: str = "") -> None:
    """`held[i]`: whether photo i's top first tokens hold Yes or No. A whole batch without
    them is a model that does not answer yes/no directly ("<think>", a chatty opening): its
    p = 0 for every photo must never be kept."""
    if held and not any(held):
        start = f" (it begins {began!r})" if began else ""
        raise ScorerError(
            f"{where}: no photo's first answer token is Yes or No{start}; use a model that "
            "answers yes/no directly (no thinking or reasoning mode)"
        )


def yes_no_variants(text: str) -> bool | None:
    """True for a "Yes" token, False for a "No" token (any case, surrounding blanks or the
    SentencePiece / byte-level space marks), None for any other token."""
    word = text.replace("\u2581", " ").replace("\u0120", " ").strip().lower()
    if word == "yes":
        return True
    if word == "no":
        return False
    return None


def logsumexp(values: Sequence[float]) -> float | None:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return None
    top = max(finite)
    return top + math.log(math.fsum(math.exp(v - top) for v in finite))


def answer_from(l_yes: float | None, l_no: float | None, words: str = "") -> Answer:
    p = yes_probability(l_yes, l_no)
    said = words or ("yes" if p >= 0.5 else "no")
    return Answer(p, said, l_yes, l_no)
