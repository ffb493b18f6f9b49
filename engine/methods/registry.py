"""The one registry of search methods: built-ins plus the `quadrat.methods` entry points.

The command line (`quadrat methods`, `search --method`, `evaluate --method`), the window's
picker and benchmark view all read this registry, so a method appears everywhere at once.
A third-party package adds a method by declaring, in its own pyproject.toml::

    [project.entry-points."quadrat.methods"]
    mymethod = "mypackage.module:MyMethod"

where `MyMethod` is a `engine.methods.Method` subclass (or an instance of one).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any

from engine.errors import BadInputError
from engine.judgments.runs import SavedRunParams
from engine.methods.base import (
    Method,
    MethodSpec,
    make_params,
    param_defaults,
    spec_label,
    split_spec,
)

if TYPE_CHECKING:
    from engine.search.filters import FilterNames

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "quadrat.methods"


class _Broken(Method):
    """Stands in for a third-party method that could not be loaded: listed, with the reason."""

    description = "could not be loaded"

    def __init__(self, key: str, reason: str) -> None:
        self.key = key  # type: ignore[misc]
        self.label = key  # type: ignore[misc]
        self._reason = reason

    def unavailable_reason(self) -> str | None:
        return self._reason


@dataclass(frozen=True)
class MethodInfo:
    """What `quadrat methods --json` says of one method (docs/SPEC.md §6.1)."""

    key: str
    label: str
    description: str
    available: bool
    reason: str | None
    params: dict[str, Any]
    kinds: tuple[str, ...]
    source: str  # "built-in" or the distribution that provides it

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "label": self.label,
            "description": self.description,
            "available": self.available,
            "reason": self.reason,
            "params": self.params,
            "kinds": list(self.kinds),
            "source": self.source,
        }


_lock = threading.Lock()
_methods: dict[str, Method] | None = None
_sources: dict[str, str] = {}


# The built-ins in registry order: key -> (module, class). A command that runs one method
# imports only its module: importing them all, and looking for plug-ins, took a fifth of a
# second of a text search. A plug-in never replaces a built-in key (`_load_entry_points`).
_BUILTIN_CLASSES = {
    "text": ("engine.methods.text", "TextMethod"),
    "visret": ("engine.methods.visret", "VisRetMethod"),
    "rerank": ("engine.methods.rerank", "RerankMethod"),
    "hybrid": ("engine.methods.hybrid", "HybridMethod"),
    "rocchio": ("engine.methods.feedback", "RocchioMethod"),
    "probe": ("engine.methods.feedback", "ProbeMethod"),
    "more-like-these": ("engine.methods.feedback", "MoreLikeTheseMethod"),
}
_builtin_instances: dict[str, Method] = {}


def _builtin(key: str) -> Method:
    """The built-in method under `key`, made once per process."""
    if key not in _builtin_instances:
        import importlib

        module, name = _BUILTIN_CLASSES[key]
        _builtin_instances.setdefault(key, getattr(importlib.import_module(module), name)())
    return _builtin_instances[key]


def _builtins() -> list[Method]:
    return [_builtin(key) for key in _BUILTIN_CLASSES]


def _load_entry_points(methods: dict[str, Method]) -> None:
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        source = entry.dist.name if entry.dist is not None else entry.value
        try:
            loaded = entry.load()
            method = loaded() if isinstance(loaded, type) else loaded
            if not isinstance(method, Method):
                raise TypeError(f"{entry.value} is not an engine.methods.Method")
            key = method.key
        except Exception as exc:  # a broken plug-in is listed with its reason, never fatal
            # Listed with the reason by `quadrat methods`; not a warning on every command.
            log.info("search method %s from %s could not be loaded: %s", entry.name, source, exc)
            methods.setdefault(entry.name, _Broken(entry.name, f"could not be loaded: {exc}"))
            _sources.setdefault(entry.name, source)
            continue
        if key in methods:
            log.warning("search method %s from %s ignored: the key is taken", key, source)
            continue
        methods[key] = method
        _sources[key] = source


def methods() -> dict[str, Method]:
    """Every method, built-ins first, then entry points (discovered once per process)."""
    global _methods
    with _lock:
        if _methods is None:
            found: dict[str, Method] = {}
            for method in _builtins():
                found[method.key] = method
                _sources[method.key] = "built-in"
            _load_entry_points(found)
            _methods = found
        return dict(_methods)


def reload() -> None:
    """Forget the discovered methods (tests install a plug-in and look again)."""
    global _methods
    with _lock:
        _methods = None
        _sources.clear()


def method_infos() -> list[MethodInfo]:
    """Every method with its availability and parameter defaults, in registry order."""
    out = []
    for key, method in methods().items():
        reason = method.unavailable_reason()
        out.append(
            MethodInfo(
                key=key,
                label=method.label,
                description=method.description,
                available=reason is None,
                reason=reason,
                params=param_defaults(method.Params),
                kinds=tuple(method.kinds),
                source=_sources.get(key, "built-in"),
            )
        )
    return out


def get_method(key: str) -> Method:
    """The method under `key`; `BadInputError` naming the known keys otherwise."""
    if key in _BUILTIN_CLASSES:
        return _builtin(key)
    found = methods()
    if key not in found:
        raise BadInputError(f"unknown search method '{key}'; known: {', '.join(found)}")
    return found[key]


def resolve_spec(text: str, *, require_available: bool = True) -> MethodSpec:
    """`KEY` or `KEY:NAME=VALUE,…` -> a MethodSpec named by `text` as given. A method that
    cannot run here is refused with its reason (unless `require_available` is False)."""
    key, raw = split_spec(text)
    method = get_method(key)
    if require_available and (reason := method.unavailable_reason()):
        raise BadInputError(f"method '{key}' cannot run here: {reason}")
    return MethodSpec(method, make_params(method, raw), text.strip())


def spec_from_params(key: str, params: dict[str, Any]) -> MethodSpec:
    """A MethodSpec from a key and stored parameters (a saved run, the window's options form)."""
    method = get_method(key)
    defaults = param_defaults(method.Params)
    known = {name: value for name, value in params.items() if name in defaults}
    spec_params = make_params(method, known)
    changed = ",".join(f"{n}={v}" for n, v in known.items() if defaults.get(n) != v)
    return MethodSpec(method, spec_params, f"{key}:{changed}" if changed else key)


def run_label(
    method: str,
    params: Mapping[str, Any] | None,
    kind: str = "text",
    names: FilterNames | None = None,
) -> str:
    """A saved run's label: the method's label, its non-default parameters, and the query kind
    if not text ("Text", "VisRet (without drawing 1)", "Hybrid · taxon=Aves · image"): the
    filters it ran within follow the method. Other keys the method does not take (details,
    photo) are ignored; a method no longer installed, or a parameter renamed since, is named by
    its key. Collections and deployments are named from `names` where given."""
    try:
        spec = spec_from_params(method, dict(params or {}))
        text = spec_label(spec.method, spec.params)
    except Exception:  # a plug-in uninstalled or broken since the run was saved
        text = method
    # Runs that differ only by their filters ("Hybrid · taxon=Aves") are told apart.
    saved = SavedRunParams.from_json(params)
    filters = saved.filters_label(names)
    # What a box or fused search ranked ("Text · boxes"): frames, the default, go unsaid.
    unit = str((saved.details or {}).get("unit", ""))
    parts = [text, unit, filters, "" if kind == "text" else kind]
    return " · ".join(part for part in parts if part)
