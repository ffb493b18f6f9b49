"""Search methods as plug-ins: one registry read by the command line, the window and benchmark
runs alike. See `engine.methods.base` for what a method is and `engine.methods.registry` for how
third-party packages add one (entry-point group `quadrat.methods`)."""

from engine.methods.base import (
    QUERY_KINDS,
    LanguageModelEndpoint,
    Method,
    MethodSpec,
    ModelManager,
    Ranking,
    SearchQuery,
    param_defaults,
    param_types,
    params_to_dict,
    spec_label,
)
from engine.methods.context import MethodContext
from engine.methods.registry import (
    ENTRY_POINT_GROUP,
    MethodInfo,
    get_method,
    method_infos,
    methods,
    reload,
    resolve_spec,
    spec_from_params,
)
from engine.methods.search import SearchJob, SearchResult, run_search, search_hits

__all__ = [
    "ENTRY_POINT_GROUP",
    "QUERY_KINDS",
    "LanguageModelEndpoint",
    "Method",
    "MethodContext",
    "MethodInfo",
    "MethodSpec",
    "ModelManager",
    "Ranking",
    "SearchJob",
    "SearchQuery",
    "SearchResult",
    "get_method",
    "method_infos",
    "methods",
    "param_defaults",
    "param_types",
    "params_to_dict",
    "reload",
    "resolve_spec",
    "run_search",
    "search_hits",
    "spec_from_params",
    "spec_label",
]
