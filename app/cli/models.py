"""`quadrat models`: models offered and installed, downloads, offline packs (docs/SPEC.md §6.6).

    quadrat models list [--json] [--role R]   the catalogue and what is installed, for the three
                                        roles: encoder, generator (VisRet), vlm (Reranked)
    quadrat models download SPEC        into the model store (Ctrl+C keeps what came); a
                                        search model is then exported to ONNX (--runtime)
    quadrat models pack SPEC OUT        one archive to carry to an offline machine (any role)
    quadrat models import PACK          install a pack (checked; a bad pack installs nothing;
                                        --replace to replace an installed model's other weights),
                                        then exported to ONNX as a download is
    quadrat models remove SPEC          delete an installed model

Failing to reach the hub is exit 1 (the command was right; the network was not there), a bad
spec or pack exit 2, as for every command.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app import paths
from app.cli.common import EXIT_OK, TqdmProgress, user_settings
from app.cli.registry import Command

if TYPE_CHECKING:
    from engine.models.store import ModelStore

EXIT_INTERRUPTED = 130
_WEIGHT_SUFFIXES = (".safetensors", ".pt", ".pth", ".bin", ".ckpt")  # weights, not a pack


def _models_arguments(models: argparse.ArgumentParser) -> None:
    """The options of `quadrat models`."""
    sub = models.add_subparsers(dest="models_command", metavar="COMMAND", required=True)
    listing = sub.add_parser("list", help="the models offered and which are installed")
    listing.add_argument("--json", action="store_true", help="one JSON list")
    listing.add_argument(
        "--role",
        choices=("encoder", "generator", "vlm"),
        help="only search models (encoder), image generators or vision-language models",
    )
    listing.set_defaults(func=cmd_list)
    download = sub.add_parser("download", help="download a model into the model store")
    download.add_argument(
        "spec", help="ARCH:PRETRAINED, hf-hub:ORG/NAME, or a generator or VLM from 'models list'"
    )
    _add_runtime(download)
    download.set_defaults(func=cmd_download)
    pack = sub.add_parser("pack", help="write an offline pack of a model (downloads it first)")
    pack.add_argument(
        "spec", help="ARCH:PRETRAINED, hf-hub:ORG/NAME, or a generator or VLM from 'models list'"
    )
    pack.add_argument("out", type=Path, help="the pack file to write (or a folder for it)")
    pack.set_defaults(func=cmd_pack)
    imp = sub.add_parser("import", help="install an offline pack (or a model file or folder)")
    imp.add_argument("pack", help="a pack file, an open_clip model folder, or ARCH:/path/file")
    imp.add_argument(
        "--replace",
        action="store_true",
        help="replace an installed model of the same name whose weights differ",
    )
    _add_runtime(imp)
    imp.set_defaults(func=cmd_import)
    remove = sub.add_parser("remove", help="delete an installed model from the model store")
    remove.add_argument("spec")
    remove.set_defaults(func=cmd_remove)


def _add_runtime(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--runtime",
        choices=("auto", "torch", "onnx"),
        help="auto or onnx (default: the settings'): export a search model to ONNX once "
        "installed, verified against torch; torch: make no export",
    )


def export_installed(spec: str, runtime: str | None) -> int:
    """After a search model is installed: its ONNX export (unless the runtime is torch), with
    progress on stderr and the outcome in one line. Ctrl+C stops it (nothing half-written is
    kept): the model stays installed and is exported at its first use instead."""
    from engine.errors import Cancelled, one_line
    from engine.models.store import export_outcome
    from engine.progress import CancelToken

    if (runtime or user_settings().runtime) == "torch":
        return EXIT_OK
    bar = TqdmProgress("exporting to ONNX", unit="step")
    cancel = CancelToken()
    try:
        export = _store().export_onnx(
            spec, cache_dir=paths.model_cache_dir(), progress=bar, cancel=cancel
        )
    except (KeyboardInterrupt, Cancelled):
        cancel.cancel()
        bar.close()
        print(
            f"ONNX export interrupted: {spec} is installed and is exported when first used",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    except Exception as error:  # the model is installed either way; torch encodes it
        bar.close()
        print(
            f"ONNX export not made ({one_line(error, 200)}): torch encodes {spec}", file=sys.stderr
        )
        return EXIT_OK
    finally:
        bar.close()
    print(f"{spec}: {export_outcome(export)}")
    return EXIT_OK


def _is_encoder(spec: str) -> bool:
    from engine.models.offers import repository_role

    return repository_role(spec) is None


def _store() -> ModelStore:
    from engine.models.store import ModelStore

    return ModelStore(paths.models_dir())


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _about(row: dict[str, Any]) -> str:
    """A row's size, marked "≈" when it is the catalogue's estimate, not the hub's figure."""
    return ("" if row["size_verified"] else "≈") + _size(row["size_bytes"])


def use_spec(role: str, spec: str, path: Path | None) -> str:
    """What a method takes to use an installed model: an encoder's spec, a generator's folder
    (the VisRet generator setting), a VLM's `vlm:FOLDER` (the Reranked scorer setting)."""
    if role == "generator" and path is not None:
        return str(path)
    if role == "vlm" and path is not None:
        return f"vlm:{path}"
    return spec


def model_rows(role: str | None = None) -> list[dict[str, Any]]:
    """The catalogue, then installed models it does not list: what `models list` shows."""
    from engine.models.offers import model_offers
    from engine.models.onnx_runtime import exports_by_spec, runtimes_of
    from engine.models.snapshots import recorded_sizes

    store = _store()
    installed = {model.spec: model for model in store.installed()}
    exports = exports_by_spec(store.root)  # which installed encoders have an ONNX export

    def runtimes(spec: str, role: str, is_installed: bool) -> list[str]:
        if not is_installed:
            return []
        return runtimes_of(spec, exports) if role == "encoder" else ["torch"]

    reported = recorded_sizes(store.root)  # what the hub said when a download listed it
    rows: list[dict[str, Any]] = []
    for offer in model_offers():
        model = installed.pop(offer.spec, None)
        fetched = (  # a downloaded generator or VLM: its files are what the hub served
            model.size_bytes
            if model is not None and model.origin == "download" and offer.role != "encoder"
            else None
        )
        download = reported.get(offer.spec, fetched or offer.download_bytes)
        rows.append(
            {
                "spec": offer.spec,
                "role": offer.role,
                "use": use_spec(offer.role, offer.spec, model.path) if model else None,
                "gated": offer.gated,
                "installed": model is not None,
                "size_bytes": model.size_bytes if model else download,
                "download_bytes": download,
                # False: download_bytes is the catalogue's estimate, not the hub's figure (an
                # installed model's size_bytes is always what is on disk).
                "size_verified": bool(
                    offer.size_verified or offer.spec in reported or fetched is not None
                ),
                "memory_bytes": offer.memory_bytes,
                "memory_estimate": True,  # a rule of thumb, never a measurement
                "label": offer.label,
                "good_at": offer.good_at,
                "licence": offer.licence,
                "licence_verified": offer.licence_verified,
                "source": offer.source,
                "origin": model.origin if model else None,
                "model_key": (model.model_key or model.spec) if model else None,
                "path": str(model.path) if model and model.path else None,
                "partial_bytes": 0 if model else _partial(store, offer.spec),
                "runtimes": runtimes(offer.spec, offer.role, model is not None),
            }
        )
    for model in installed.values():
        rows.append(
            {
                "spec": model.spec,
                "role": model.role,
                "use": use_spec(model.role, model.spec, model.path),
                "gated": False,
                "installed": True,
                "size_bytes": model.size_bytes,
                "download_bytes": None,
                "size_verified": True,  # size_bytes: counted on disk; no download offered
                "memory_bytes": None,
                "memory_estimate": True,
                "label": model.spec,
                "good_at": "",
                "licence": model.licence,
                "licence_verified": False,
                "source": model.source,
                "origin": model.origin,
                "model_key": model.model_key or None,
                "path": str(model.path) if model.path else None,
                "partial_bytes": 0,
                "runtimes": runtimes(model.spec, model.role, True),
            }
        )
    from engine.models.offers import ROLES

    rows.sort(key=lambda row: ROLES.index(row["role"]) if row["role"] in ROLES else len(ROLES))
    return [row for row in rows if role is None or row["role"] == role]


def _partial(store: ModelStore, spec: str) -> int:
    from engine.errors import BadInputError

    try:
        return int(store.partial_bytes(spec))
    except BadInputError:  # the demo: nothing to download
        return 0


_HEADINGS = {
    "encoder": "Search models (CLIP encoders)",
    "generator": "Image generators",
    "vlm": "Vision-language models",
}


def cmd_list(args: argparse.Namespace) -> int:
    rows = model_rows(args.role)
    if args.json:
        print(json.dumps(rows))
        return EXIT_OK
    for index, row in enumerate(rows):
        if index == 0 or row["role"] != rows[index - 1]["role"]:
            role = row["role"]
            print(f"{_HEADINGS.get(role, role)}:")
        if row["installed"] and row["origin"] == "pack":
            # Not verified as the published model: say so, and under which identity it indexes.
            state = (
                f"installed (from a pack, {_size(row['size_bytes'])}; "
                f"its vectors are kept apart as {row['model_key']})"
            )
        elif row["installed"]:
            state = f"installed ({row['origin']}, {_size(row['size_bytes'])})"
        elif row["partial_bytes"]:
            state = (
                f"partly downloaded ({_size(row['partial_bytes'])} of {_about(row)}"
                f"{'' if row['size_verified'] else ', estimate'})"
            )
        else:
            state = f"download {_about(row)}{'' if row['size_verified'] else ' (estimate)'}"
        print(f"{row['spec']:<32} {state}")
        if row["good_at"]:
            memory = f" Needs ~{_size(row['memory_bytes'])} memory." if row["memory_bytes"] else ""
            good_at = row["good_at"].rstrip(".") + "."
            print(f"{'':<32} {row['label']}: {good_at}{memory}")
            unchecked = "" if row["licence_verified"] else " (not checked: see the model card)"
            print(f"{'':<32} Licence: {row['licence']}{unchecked}")
        if row["installed"] and row["use"] != row["spec"]:
            print(f"{'':<32} use it as: {row['use']}")
    print(f"model store: {paths.models_dir()}", file=sys.stderr)
    return EXIT_OK


def cmd_download(args: argparse.Namespace) -> int:
    from engine.errors import Cancelled
    from engine.progress import CancelToken

    store = _store()
    if store.is_installed(args.spec):
        print(f"{args.spec} is already installed")
        # A search model's export, should it have none yet (made once per model key).
        return export_installed(args.spec, args.runtime) if _is_encoder(args.spec) else EXIT_OK
    bar = TqdmProgress("downloading", unit="B")
    cancel = CancelToken()
    try:
        model = store.download(args.spec, progress=bar, cancel=cancel)
    except (KeyboardInterrupt, Cancelled):
        cancel.cancel()
        bar.close()
        kept = _size(store.partial_bytes(args.spec))
        print(
            f"interrupted: {kept} downloaded so far are kept; run the same command to resume",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    finally:
        bar.close()
    print(f"installed {model.spec} ({_size(model.size_bytes)}) in {model.path}")
    if model.role != "encoder":
        print(f"use it as: {use_spec(model.role, model.spec, model.path)}")
        return EXIT_OK
    return export_installed(model.spec, args.runtime)


def cmd_pack(args: argparse.Namespace) -> int:
    bar = TqdmProgress("packing", unit="B")
    try:
        out = _store().pack(args.spec, args.out, progress=bar)
    finally:
        bar.close()
    print(f"wrote {out} ({_size(out.stat().st_size)}); install it with 'quadrat models import'")
    return EXIT_OK


def cmd_import(args: argparse.Namespace) -> int:
    bar = TqdmProgress("importing", unit="B")
    try:
        store = _store()
        source = Path(args.pack).expanduser()
        if source.is_file() and source.suffix.lower() not in _WEIGHT_SUFFIXES:
            model = store.import_pack(source, progress=bar, replace=args.replace)
        else:
            model = store.import_file(args.pack)
    finally:
        bar.close()
    if model.role == "encoder":
        print(
            f"installed {model.spec} ({_size(model.size_bytes)}); use it with --model {model.spec}"
        )
    else:
        print(f"installed {model.spec} ({_size(model.size_bytes)}) in {model.path}")
        print(f"use it as: {use_spec(model.role, model.spec, model.path)}")
    if model.origin == "pack":
        print(
            f"from a pack, so not verified as the published model: libraries index it as "
            f"{model.model_key}, apart from the published model's vectors"
        )
    return export_installed(model.spec, args.runtime) if model.role == "encoder" else EXIT_OK


def cmd_remove(args: argparse.Namespace) -> int:
    _store().remove(args.spec)
    print(f"removed {args.spec}")
    return EXIT_OK


COMMANDS = (
    Command(
        "models",
        help="list, download, pack, import or remove models",
        description="Models offered and installed; offline packs for machines without network.",
        add_arguments=_models_arguments,
    ),
)
