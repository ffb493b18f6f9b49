"""What a search method is: its query, its typed parameters, its context and its ranking.

A method is plain Python: `run(query, params, context, top_k=..., candidates=...)` returns a
`Ranking`. Slow methods report through `context.progress` and stop at `context.cancel`. A method
may stand on another one (a reranker over any base method) by running it through
`context.run_method` (`engine.methods.context`); under the rerank protocol `candidates` is the fixed list to reorder, for
every method alike.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
import types
import typing
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

from engine.errors import BadInputError

if TYPE_CHECKING:
    from engine.methods.context import MethodContext

log = logging.getLogger(__name__)

QUERY_KINDS: tuple[str, ...] = ("text", "image", "image+text")


@dataclass(frozen=True)
class SearchQuery:
    """What the user asked: words, an example photo, or both."""

    text: str = ""
    image: Path | None = None

    @property
    def kind(self) -> str:
        """ "text", "image" or "image+text"."""
        if self.image is None:
            return "text"
        return "image+text" if self.text.strip() else "image"


@dataclass(frozen=True)
class LanguageModelEndpoint:
    """An OpenAI-compatible chat endpoint the user configured (a local llama.cpp, Ollama or
    vLLM server, or a hosted one) for methods that ask a language model (prompt rewriting,
    subqueries). An empty `url` means none is configured."""

    url: str = ""
    model: str = ""
    api_key: str = field(default="", repr=False)  # never in a log line or a message

    @property
    def configured(self) -> bool:
        return bool(self.url.strip())


@dataclass
class Ranking:
    """A method's answer: image ids best first, their scores, and optional evidence per image
    (what a drawn image matched, each subquery's answer) for the window to show."""

    ids: list[int]
    scores: list[float]
    evidence: dict[int, dict[str, Any]] = field(default_factory=dict)
    # What the run was made of, kept with a saved run under params["details"] (visret: the
    # prompt, the generator, each drawing's index, seed, cache key, file and error).
    details: dict[str, Any] = field(default_factory=dict)
    # The rankings of the methods this one stood on, as (spec text, ranking): a reranked search
    # also yields its base search, which the window keeps as a run of the same query so the
    # metrics compare the two on the same judgments. Never saved inside this run.
    companions: list[tuple[str, Ranking]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.scores):
            raise ValueError(f"{len(self.ids)} ids for {len(self.scores)} scores")

    @classmethod
    def from_pairs(cls, pairs: Sequence[tuple[int, float]]) -> Ranking:
        return cls([int(i) for i, _ in pairs], [float(s) for _, s in pairs])

    def pairs(self) -> list[tuple[int, float]]:
        return list(zip(self.ids, self.scores, strict=True))

    def __len__(self) -> int:
        return len(self.ids)


T = TypeVar("T")


class ModelManager:
    """Loads each large model once and keeps at most `max_large` of them: loading another one
    first frees the least recently used (a CLIP encoder and a Stable Diffusion pipeline need not
    share a GPU at once). Small models are kept without counting."""

    def __init__(self, max_large: int = 1) -> None:
        self.max_large = max_large
        self._large: OrderedDict[str, Any] = OrderedDict()
        self._small: dict[str, Any] = {}
        self._lock = threading.RLock()

    def get(self, key: str, loader: Callable[[], T], *, large: bool = True) -> T:
        """The model under `key`, loaded with `loader()` on first use."""
        with self._lock:
            # The cache holds models of every kind: the key says which, the caller's loader
            # gave its type when it was loaded.
            if key in self._small:
                return cast(T, self._small[key])
            if key in self._large:
                self._large.move_to_end(key)
                return cast(T, self._large[key])
            if large:
                while len(self._large) >= self.max_large:
                    old_key, _ = self._large.popitem(last=False)
                    log.info("freeing model %s to make room for %s", old_key, key)
                    _free_accelerator_memory()
            model = loader()
            (self._large if large else self._small)[key] = model
            return model

    def loaded(self) -> list[str]:
        with self._lock:
            return [*self._small, *self._large]

    def release(self, key: str) -> None:
        with self._lock:
            self._small.pop(key, None)
            if self._large.pop(key, None) is not None:
                _free_accelerator_memory()


def _free_accelerator_memory() -> None:
    import sys

    torch = sys.modules.get("torch")  # never import torch just to free nothing
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


class Method:
    """A search method. Subclasses set `key`, `label`, `description`, `Params` (a frozen
    dataclass whose fields are the method's parameters, with defaults) and implement `run`."""

    key: ClassVar[str]
    label: ClassVar[str]
    description: ClassVar[str]
    Params: ClassVar[type] = type("NoParams", (), {})
    kinds: ClassVar[tuple[str, ...]] = ("text",)  # the query kinds the method answers
    # A method that learns from the open query's judgments (rocchio, probe): it runs on a saved
    # query, and a benchmark cannot score it against the judgments it would learn from.
    needs_judgments: ClassVar[bool] = False

    def unavailable_reason(self) -> str | None:
        """Why the method cannot run here (a missing optional package, no model), or None."""
        return None

    def param_label(self, name: str, value: Any) -> str | None:
        """How a non-default parameter reads in a run's label, when `name=value` would not
        say it plainly (VisRet's 0-based `leave_out`); None for `name=value`."""
        return None

    def run(
        self,
        query: SearchQuery,
        params: Any,
        context: MethodContext,
        *,
        top_k: int,
        candidates: Sequence[int] | None = None,
    ) -> Ranking:
        raise NotImplementedError


# -- parameters ------------------------------------------------------------------------------


def param_fields(params_type: type) -> list[dataclasses.Field[Any]]:
    """The parameter fields of a method's Params dataclass (none for a method without any)."""
    return list(dataclasses.fields(params_type)) if dataclasses.is_dataclass(params_type) else []


def param_defaults(params_type: type) -> dict[str, Any]:
    """Parameter name -> default value."""
    return {f.name: f.default for f in param_fields(params_type)}


def param_types(params_type: type) -> dict[str, type]:
    """Parameter name -> its Python type (str, int, float or bool)."""
    hints = typing.get_type_hints(params_type) if param_fields(params_type) else {}
    out: dict[str, type] = {}
    for f in param_fields(params_type):
        hint = hints.get(f.name, str)
        if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
        out[f.name] = hint if isinstance(hint, type) else str
    return out


def params_to_dict(params: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(params) and not isinstance(params, type):
        return dataclasses.asdict(params)
    return {}


def _convert(method: str, name: str, kind: type, text: str) -> Any:
    value = text.strip()
    try:
        if kind is bool:
            if value.lower() in ("1", "true", "yes", "on"):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if kind is int:
            return int(value)
        if kind is float:
            return float(value)
    except ValueError:
        raise BadInputError(
            f"method '{method}': {name} expects {kind.__name__}, got {text!r}"
        ) from None
    return text


def make_params(method: Method, values: dict[str, Any]) -> Any:
    """A Params instance from `values` (names checked, strings converted to the field types)."""
    types_ = param_types(method.Params)
    unknown = sorted(set(values) - set(types_))
    if unknown:
        known = ", ".join(types_) or "none"
        raise BadInputError(
            f"method '{method.key}' has no parameter {', '.join(unknown)} (its parameters: {known})"
        )
    converted = {
        name: _convert(method.key, name, types_[name], value) if isinstance(value, str) else value
        for name, value in values.items()
    }
    if not types_:
        return method.Params()
    params = method.Params(**converted)
    check = getattr(params, "check", None)
    if callable(check):
        check()
    return params


# A comma starts a new NAME=VALUE pair only where one follows, so values may hold commas.
_PAIR_SPLIT = re.compile(r",(?=\s*[A-Za-z_][A-Za-z0-9_]*\s*=)")


def split_spec(text: str) -> tuple[str, dict[str, str]]:
    """`KEY` or `KEY:NAME=VALUE[,NAME=VALUE…]` -> (key, {name: raw value}) (docs/SPEC.md §6.1)."""
    key, _, rest = text.strip().partition(":")
    values: dict[str, str] = {}
    if rest.strip():
        for pair in _PAIR_SPLIT.split(rest):
            name, eq, value = pair.partition("=")
            if not eq or not name.strip():
                raise BadInputError(
                    f"--method {text!r}: parameters are written NAME=VALUE, separated by commas"
                )
            values[name.strip()] = value
    if not key.strip():
        raise BadInputError(f"--method {text!r}: the method key is missing")
    return key.strip(), values


@dataclass(frozen=True)
class MethodSpec:
    """A method with its parameters, named by the string the user gave (`text` exactly as
    written on the command line, or the key plus its non-default parameters)."""

    method: Method
    params: Any
    text: str

    @property
    def key(self) -> str:
        return self.method.key

    def params_dict(self) -> dict[str, Any]:
        return params_to_dict(self.params)

    def check_query(self, query: SearchQuery) -> None:
        """Refuse a query kind the method does not answer, with a clear message."""
        if query.kind not in self.method.kinds:
            raise BadInputError(
                f"method '{self.key}' answers {', '.join(self.method.kinds)} queries, not "
                f"{query.kind} queries"
            )

    def run(
        self,
        query: SearchQuery,
        context: MethodContext,
        *,
        top_k: int,
        candidates: Sequence[int] | None = None,
    ) -> Ranking:
        """Run the method, refusing a query kind it does not answer, with a clear message."""
        reason = self.method.unavailable_reason()
        if reason:
            raise BadInputError(f"method '{self.key}' cannot run here: {reason}")
        self.check_query(query)
        if top_k < 1:
            raise BadInputError("--top must be at least 1")
        return self.method.run(query, self.params, context, top_k=top_k, candidates=candidates)


def spec_label(method: Method, params: Any) -> str:
    """A short name for a method with parameters: its label plus what differs from defaults."""
    defaults = param_defaults(method.Params)
    changed = [
        method.param_label(name, value) or f"{name}={_short(str(value))}"
        for name, value in params_to_dict(params).items()
        if defaults.get(name) != value
    ]
    return f"{method.label} ({', '.join(changed)})" if changed else method.label


LABEL_VALUE_CHARS = 24  # a longer option value (written subqueries, a prompt) is cut in labels


def _short(value: str) -> str:
    """`value` cut to LABEL_VALUE_CHARS in a label; the run keeps its parameters whole."""
    value = " ".join(value.split())
    return value if len(value) <= LABEL_VALUE_CHARS else value[: LABEL_VALUE_CHARS - 1] + "…"
