"""What a rerank run will cost before it starts: calls = photos × subqueries, and a rough time.

The per-call seconds are order-of-magnitude figures for a laptop CPU (CLIP) and a typical
local GPU or hosted endpoint (language models); a scorer that knows better sets
`seconds_per_call`. The window shows them as "about", never as a promise.
"""

from __future__ import annotations

from engine.rerank.base import Scorer

# Seconds per (photo, subquery) call by scorer kind (the part of the spec or identity before ":").
SECONDS_PER_CALL: dict[str, float] = {
    "clip": 0.004,  # one text encoding per question, photo vectors from the index or one pass
    "clip-regions": 0.03,  # a grid of crops per photo, encoded once and reused per question
    "demo": 0.03,  # the crops as clip-regions, then a small head per question
    "auto": 0.03,  # demo or clip-regions, alike in cost
    "vlm": 0.4,  # one forward pass of a small vision-language model, batched
    "endpoint": 1.5,  # an HTTP round trip to a hosted model
}


def scorer_kind(scorer: Scorer | str) -> str:
    """ "clip", "clip-regions", "vlm" or "endpoint" (the kind whose time per call applies)."""
    text = scorer if isinstance(scorer, str) else scorer.identity
    head, _, rest = text.strip().partition(":")
    if head == "clip" and rest.split(":")[0] == "regions":
        return "clip-regions"
    return head or "clip"


def estimate_cost(photos: int, questions: int, scorer: Scorer | str) -> tuple[int, float]:
    """(calls, seconds) for scoring `photos` × `questions` with `scorer` (a Scorer or a spec)."""
    calls = max(0, int(photos)) * max(0, int(questions))
    per_call = getattr(scorer, "seconds_per_call", None)
    if not isinstance(per_call, int | float) or per_call < 0:
        per_call = SECONDS_PER_CALL.get(scorer_kind(scorer), SECONDS_PER_CALL["endpoint"])
    return calls, calls * float(per_call)
