"""What the `quadrat` subcommands share: the settings file read once, the library and model they
work on, progress bars on stderr, and confirmations. Every `app/cli/` command module imports from
here, never from `app.cli` itself, so the command modules form no import cycle."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from app import paths
from engine.errors import BadInputError

if TYPE_CHECKING:  # imported where used, so a command loads only what it needs
    from app.settings import Settings
    from engine.catalog.library import Library
    from engine.methods.base import MethodSpec
    from engine.models.choice import EncoderChoice
    from engine.models.encoders import Encoder
    from engine.progress import Progress

log = logging.getLogger("quadrat.cli")

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2

_settings: Settings | None = None  # read once per command, see main()


def user_settings() -> Settings:
    """The settings the window also uses, read once per command; a bad file falls back to
    defaults (logged once)."""
    global _settings
    if _settings is None:
        from app.settings import load_settings

        loaded = load_settings()
        for problem in loaded.problems:
            log.warning("settings: %s", problem)
        _settings = loaded.settings
    return _settings


_database_url: str | None = None  # the command's --database-url, see main()


def set_database_url(url: str | None) -> None:
    """The catalog URL given on the command line (None: the settings' applies)."""
    global _database_url
    _database_url = url


def open_library(path: Path | None) -> Library:
    """The library at `path`, else the one the settings name (as the window opens it).

    Its catalog: the one the folder records, else --database-url, else the settings' database
    URL (which applies to `--library` folders too), else a SQLite file in the folder."""
    from app.settings import ROOT_MAP_ENV, index_memory_bytes, root_map_of
    from engine.catalog.library import Library

    settings = user_settings()
    database_url = _database_url if _database_url is not None else settings.database_url
    folder = path if path is not None else settings.library_path()
    # This workstation's folders for roots the catalog records elsewhere (a shared catalog).
    root_map = root_map_of(os.environ.get(ROOT_MAP_ENV, ""), settings.root_map)
    library = Library.open(folder, database_url=database_url or None, root_map=root_map)
    library.index_memory_budget = index_memory_bytes(settings.index_memory_gb)
    return library


def saved_query_id(library: Library, id_or_text: str) -> int:
    """The saved query a command names by its id or by its exact text (`--query ID_OR_TEXT`);
    a one-line BadInputError when there is none."""
    from sqlalchemy import select

    from engine.catalog import Query
    from engine.judgments.queries import find_query

    wanted = id_or_text.strip()
    with library.catalog.session() as s:
        if wanted.isdigit():
            if s.get(Query, int(wanted)) is not None:
                return int(wanted)
            raise BadInputError(f"no saved query has id {wanted}")
        found = find_query(s, wanted)
        if found is None:
            # the text of a query saved with a photo beside it
            found = s.scalar(select(Query.id).where(Query.text == wanted).order_by(Query.id))
    if found is None:
        raise BadInputError(f"no saved query has the text {wanted!r}")
    return int(found)


def one_query_argument(args: argparse.Namespace, command: str) -> str:
    """The one `--query ID_OR_TEXT` a command about a single saved query was given; a one-line
    BadInputError naming `command` when it was given none or several."""
    if not args.query or len(args.query) != 1:
        raise BadInputError(f"{command} needs exactly one --query ID_OR_TEXT")
    return str(args.query[0])


def resolve_model_spec(requested: str | None, library: Library) -> str:
    """The model to use: the one asked for, else the library's, else the settings' default."""
    return requested or library.model_spec or user_settings().model


def encoder_choice(spec: str, device: str | None, runtime: str | None) -> EncoderChoice:
    """`spec` parsed once, on `device` and `runtime` (None: the settings'), from the model
    store and cache of `app.paths`."""
    from engine.models.choice import EncoderChoice

    settings = user_settings() if device is None or runtime is None else None
    return EncoderChoice.of(
        spec,
        paths.models_dir(),
        paths.model_cache_dir(),
        device=device or (settings.device if settings else "auto"),
        runtime=runtime or (settings.runtime if settings else "auto"),
    )


def load_encoder_for(
    spec: str, device: str | None, runtime: str | None = None, *, export: bool = True
) -> Encoder:
    """The encoder of `spec` on `device` and `runtime` (None: the settings'); an ONNX export
    made on first use (unless `export` is False) shows its progress on stderr."""
    return _load_chosen(encoder_choice(spec, device, runtime), export=export)


def _load_chosen(choice: EncoderChoice, *, export: bool) -> Encoder:
    bars: list[TqdmProgress] = []  # a bar only once an export starts, not on every load

    def bar(progress: Progress) -> None:
        if not bars:
            bars.append(TqdmProgress("exporting to ONNX (once)", unit="tower"))
        bars[0](progress)

    try:
        # Offline with a model not on disk: one line before seconds of importing torch.
        return choice.load(export=export, preflight=True, progress=bar)
    finally:
        for made in bars:
            made.close()


def search_encoder(
    requested: str | None, library: Library, device: str | None, runtime: str | None, *, text: bool
) -> Encoder:
    """The encoder `quadrat search` uses (`engine.models.choice.choose_encoder`): for a `text`
    query of the library's own model, its stored ONNX text tower (no torch), anything else it
    is asked to encode loading the model as `load_encoder_for` does; otherwise the model,
    waiting for no ONNX export (indexing makes it) unless the onnx runtime is asked for."""
    from engine.models.choice import choose_encoder

    choice = encoder_choice(resolve_model_spec(requested, library), device, runtime)
    return choose_encoder(
        choice,
        lambda: _load_chosen(choice, export=choice.runtime == "onnx"),
        library=(library.model_key, library.model_spec) if text else None,
        fallback=lambda: _load_chosen(choice, export=True),
    )


class TqdmProgress:
    """Feeds engine progress reports to a tqdm bar on stderr."""

    def __init__(self, desc: str, unit: str = "img") -> None:
        from tqdm import tqdm

        from engine.indexing.coco import READING_METADATA

        self._unit = unit
        self._bytes_message = READING_METADATA
        self._bar = tqdm(
            total=0,
            desc=desc,
            unit=unit,
            unit_scale=unit == "B",  # bytes read as kB, MB, GB
            file=sys.stderr,
            disable=None,
            leave=True,
        )

    def __call__(self, p: Progress) -> None:
        if self._bar.disable:  # no terminal: tqdm keeps no state to update
            return
        # Reading a metadata file reports bytes through the same callback as the photos.
        unit = "B" if p.message == self._bytes_message else self._unit
        if self._bar.unit != unit:
            self._bar.unit, self._bar.unit_scale = unit, unit == "B"
        if self._bar.total != p.total:
            self._bar.total = p.total
        self._bar.n = p.done
        if p.message:
            self._bar.set_description(p.message, refresh=False)
        self._bar.refresh()

    def close(self) -> None:
        self._bar.close()


def confirm(question: str, yes: bool) -> None:
    """Ask on the terminal before an act that drops or replaces the user's work; without a
    terminal, refuse unless --yes was given. A "no" raises BadInputError: nothing was done."""
    if yes:
        return
    if not sys.stdin or not sys.stdin.isatty():
        raise BadInputError(f"{question}: add --yes to confirm (no terminal to ask on)")
    answer = input(f"{question}? [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        raise BadInputError("nothing was changed")


# `search` shortcuts for the visret method's parameters: option dest -> parameter name.
VISRET_SHORTCUTS: dict[str, str] = {
    "generator": "generator",
    "images": "images",
    "seed": "seed",
    "rrf_k": "k_rrf",
}


def add_visret_options(p: argparse.ArgumentParser) -> None:
    """`--generator`, `--images`, `--seed`, `--rrf-k`: shortcuts for `--method visret:…`."""
    from app.cli.args import positive_int

    group = p.add_argument_group("visret (with --method visret)")
    group.add_argument(
        "--generator",
        metavar="SPEC",
        help="text-to-image generator: demo-painter, a diffusers folder, a .safetensors file or "
        "hf-hub:ORG/NAME (default: the settings' generator; the demo painter on a demo library)",
    )
    group.add_argument("--images", type=positive_int, help="drawings per query (default 3)")
    group.add_argument("--seed", type=int, help="seed of the first drawing (default 0)")
    group.add_argument("--rrf-k", type=int, help="k of reciprocal rank fusion (default 1)")


def visret_spec(args: argparse.Namespace) -> str:
    """`args.method` with the visret shortcuts given on the command line joined to it
    (`--images 5` -> `visret:images=5`); the shortcuts with another method are refused."""
    given = {
        name: getattr(args, dest)
        for dest, name in VISRET_SHORTCUTS.items()
        if getattr(args, dest, None) is not None
    }
    method = args.method
    if not given:
        return str(method)
    key, _, rest = str(method).partition(":")
    if key.strip() != "visret":
        options = ", ".join("--" + d.replace("_", "-") for d in VISRET_SHORTCUTS)
        raise BadInputError(f"{options} apply to --method visret, not {key.strip()!r}")
    pairs = ",".join(f"{name}={value}" for name, value in given.items())
    return f"visret:{rest},{pairs}" if rest.strip() else f"visret:{pairs}"


# `search` shortcuts for the rerank method's parameters: option dest -> parameter name.
RERANK_SHORTCUTS: dict[str, str] = {
    "base": "base",
    "subqueries": "subqueries",
    "scorer": "scorer",
    "depth": "depth",
    "decomposer": "decomposer",
    "aggregate": "aggregate",
    "expert_context": "context",
}


def add_rerank_options(p: argparse.ArgumentParser) -> None:
    """`--base`, `--subqueries`, `--scorer`, `--depth`, ...: shortcuts for `--method rerank:…`."""
    from app.cli.args import positive_int

    group = p.add_argument_group("rerank (with --method rerank)")
    group.add_argument("--base", metavar="SPEC", help="the method to rerank (default: text)")
    group.add_argument(
        "--subqueries",
        metavar="Q1;Q2",
        help='your yes/no questions, ";"-separated (default: built-in ones from the query)',
    )
    group.add_argument(
        "--scorer",
        metavar="SPEC",
        help="who answers them: auto, demo, demo:mean, clip, clip:regions, clip:whole, vlm:PATH or "
        "endpoint:URL[#MODEL] (default: auto, the demo answering model on a library indexed "
        "with the demo model, else clip)",
    )
    group.add_argument("--depth", type=positive_int, help="rerank the top N (default 100)")
    group.add_argument(
        "--decomposer",
        choices=["builtin", "llm"],
        help="who writes the questions when --subqueries is not given (llm: the settings' "
        "language-model endpoint; falls back to builtin with a note)",
    )
    group.add_argument("--aggregate", choices=["mean", "min", "product"])
    group.add_argument(
        "--expert-context", metavar="TEXT", help="expert context given to the scorer"
    )


def method_from_args(args: argparse.Namespace) -> MethodSpec:
    """The MethodSpec of `args.method` with the visret and rerank shortcuts applied; a
    shortcut given with another method is refused. Rerank's values are set on its parameters
    directly (a --base spec or a question may hold commas and "=")."""
    import dataclasses

    from engine.methods import resolve_spec
    from engine.methods.base import MethodSpec

    spec = resolve_spec(visret_spec(args))
    given = {
        name: getattr(args, dest)
        for dest, name in RERANK_SHORTCUTS.items()
        if getattr(args, dest, None) is not None
    }
    if not given:
        return spec
    if spec.key != "rerank":
        options = ", ".join("--" + d.replace("_", "-") for d in RERANK_SHORTCUTS)
        raise BadInputError(f"{options} apply to --method rerank, not {spec.key!r}")
    params = dataclasses.replace(spec.params, **given)
    params.check()
    resolve_spec(params.base)  # a bad base fails before any model loads
    pairs = ",".join(f"{name}={value}" for name, value in given.items())
    _, _, rest = spec.text.partition(":")
    return MethodSpec(spec.method, params, f"rerank:{rest},{pairs}" if rest else f"rerank:{pairs}")


def reset_settings() -> None:
    """Forget the settings read by the previous command (each command reads the file anew)."""
    global _settings, _database_url
    _settings = None
    _database_url = None
