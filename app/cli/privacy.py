"""`quadrat sensitive-taxa`: the lab's list of taxa whose places every export generalises or
withholds (engine/catalog/privacy.py).

    quadrat sensitive-taxa list [--json]
    quadrat sensitive-taxa add NAME [NAME ...] (--withhold | --grid KM) [--note TEXT]
    quadrat sensitive-taxa remove NAME [NAME ...]
    quadrat sensitive-taxa import FILE.csv     (columns: name, action, grid_km, note)

A name is a scientific name at any rank ("Lynx lynx", "Bufonidae"); it matches a photo whose
taxon or any taxon above it has that name, in any case. The list lives in the catalog, so every
workstation of a shared catalog applies the same one.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path
from typing import TYPE_CHECKING

from app.cli.common import EXIT_OK, open_library
from app.cli.registry import Command
from engine.errors import BadInputError

if TYPE_CHECKING:
    from engine.catalog.privacy import SensitiveRule


def _arguments(command: argparse.ArgumentParser) -> None:
    """The options of `quadrat sensitive-taxa`."""
    actions = command.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="the list, by name")
    listing.add_argument("--json", action="store_true", help="print one JSON object")
    add = actions.add_parser("add", help="add taxa, or change how they are treated")
    add.add_argument("names", nargs="+", metavar="NAME")
    how = add.add_mutually_exclusive_group(required=True)
    how.add_argument("--withhold", action="store_true", help="publish no place at all")
    how.add_argument(
        "--grid", type=float, metavar="KM",
        help="publish the centre of a grid cell of this size (e.g. 10) with its uncertainty",
    )  # fmt: skip
    add.add_argument("--note", help="why (kept with the entry)")
    remove = actions.add_parser("remove", help="take taxa off the list")
    remove.add_argument("names", nargs="+", metavar="NAME")
    imported = actions.add_parser(
        "import", help="add a CSV list (columns name, action, grid_km, note)"
    )
    imported.add_argument("file", type=Path)
    for sub in (listing, add, remove, imported):
        sub.add_argument("--library", type=Path, help="library folder")


def _rules_from_csv(path: Path) -> list[SensitiveRule]:
    from engine.catalog.privacy import checked_rule

    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            rows = list(csv.DictReader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise BadInputError(f"{path}: cannot be read as a CSV file ({exc})") from None
    rules = []
    for line, row in enumerate(rows, start=2):
        grid_text = (row.get("grid_km") or "").strip()
        try:
            grid = float(grid_text) if grid_text else None
            rules.append(
                checked_rule(
                    row.get("name") or "",
                    (row.get("action") or "").strip().lower(),
                    grid,
                    row.get("note"),
                )
            )
        except (BadInputError, ValueError) as exc:
            raise BadInputError(f"{path}, line {line}: {exc}; nothing was imported") from None
    return rules


def run_sensitive_taxa_command(args: argparse.Namespace) -> int:
    from engine.catalog.privacy import (
        ACTION_GENERALISE,
        ACTION_WITHHOLD,
        checked_rule,
        remove_sensitive_taxa,
        sensitive_rules,
        set_sensitive_taxa,
    )
    from engine.judgments.queries import QueryStore

    with open_library(args.library) as library:
        catalog = library.catalog
        if args.action == "list":
            rules = sensitive_rules(catalog)
            if args.json:
                entries = [
                    {"name": r.name, "action": r.action, "grid_km": r.grid_km, "note": r.note}
                    for r in rules
                ]
                print(json.dumps({"sensitive_taxa": entries}))
            elif not rules:
                print("no sensitive taxa: exports publish places as their records allow")
            for rule in [] if args.json else rules:
                print(rule.description + (f" ({rule.note})" if rule.note else ""))
            return EXIT_OK
        if args.action == "remove":
            removed = remove_sensitive_taxa(catalog, args.names)
            print(f"{removed} of {len(args.names)} removed")
            return EXIT_OK
        if args.action == "add":
            action = ACTION_WITHHOLD if args.withhold else ACTION_GENERALISE
            new = [checked_rule(name, action, args.grid, args.note) for name in args.names]
        else:
            new = _rules_from_csv(args.file)
        who = QueryStore(library, user=None).user
        written = set_sensitive_taxa(catalog, new, added_by=who)
        print(f"{written} sensitive {'taxon' if written == 1 else 'taxa'} set")
    return EXIT_OK


COMMANDS = (
    Command(
        "sensitive-taxa",
        help="the taxa whose places exports generalise to a grid or withhold",
        description="The lab's sensitive taxa: every export (Darwin Core, Camtrap DP), the map "
        "and the place filter's display generalise their photos' places to a grid or withhold "
        "them. A name is a scientific name at any rank.",
        add_arguments=_arguments,
        run=run_sensitive_taxa_command,
    ),
)
