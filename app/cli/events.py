"""`quadrat deployments` and `quadrat search --events`: camera deployments, their clock
offsets, the event gap, and search results collapsed to events.

    quadrat deployments [--library DIR] [--json]          list the deployments
    quadrat deployments --offset ID SECONDS                set a deployment's clock offset
    quadrat deployments --undo-offset ID                   bring back its previous offset
    quadrat deployments --mark FOLDER | --unmark FOLDER    a folder tree as deployments
    quadrat deployments --gap SECONDS                      the event gap (default 60 s)
    quadrat deployments --undated [--json]                 the photos with no capture time
    quadrat deployments --set-apart ID | --rejoin ID       a frame as its own event, or back

Deployments and events are made after every indexing run (`engine.indexing.deployments`);
these commands change them and group the events again.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from app.cli.args import positive_int
from app.cli.common import EXIT_OK, open_library
from app.cli.registry import Command
from engine.errors import BadInputError

if TYPE_CHECKING:
    from engine.catalog.library import Library
    from engine.search.events import EventHit
    from engine.search.searcher import SearchHit


def _arguments(p: argparse.ArgumentParser) -> None:
    """The options of `quadrat deployments`."""
    p.add_argument("--library", type=Path, help="library folder (catalog, indexes, caches)")
    change = p.add_mutually_exclusive_group()
    change.add_argument(
        "--offset",
        nargs=2,
        metavar=("ID", "SECONDS"),
        help="add SECONDS to the clock of deployment ID (negative: the camera was ahead) for "
        "every time shown, filtered and exported; the previous offset is kept for --undo-offset",
    )
    change.add_argument(
        "--undo-offset", type=positive_int, metavar="ID", help="bring back the previous offset"
    )
    change.add_argument(
        "--mark", type=Path, metavar="FOLDER", help="each folder in it: one deployment"
    )
    change.add_argument("--unmark", type=Path, metavar="FOLDER", help="take a --mark back")
    change.add_argument(
        "--gap", type=int, metavar="SECONDS", help="the event gap: frames of a camera at most "
        "this far apart are one event (default 60)",
    )  # fmt: skip
    change.add_argument(
        "--undated", action="store_true", help="list the photos with no capture time"
    )
    change.add_argument(
        "--set-apart", type=positive_int, metavar="IMAGE_ID", help="a frame as its own event"
    )
    change.add_argument(
        "--rejoin",
        type=positive_int,
        metavar="IMAGE_ID",
        help="a frame set apart back in its burst",
    )
    p.add_argument("--json", action="store_true", help="print JSON")


def _whole_number(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise BadInputError(f"--offset: {what} is a whole number, got {text!r}") from None


def cmd_deployments(args: argparse.Namespace) -> int:
    from engine.indexing import deployments as dep
    from engine.indexing.events import check_event_gap, event_gap, set_apart, set_event_gap

    if args.gap is not None:
        check_event_gap(args.gap)  # before the library opens
    with open_library(args.library) as library:
        if args.offset is not None:
            deployment_id = _whole_number(args.offset[0], "the deployment ID")
            before, after = dep.set_clock_offset(
                library, deployment_id, _whole_number(args.offset[1], "the offset in seconds")
            )
            print(f"deployment {deployment_id}: clock offset {after:+d} s (was {before:+d} s; "
                  f"--undo-offset {deployment_id} brings it back)")  # fmt: skip
        elif args.undo_offset is not None:
            before, after = dep.undo_clock_offset(library, args.undo_offset)
            print(f"deployment {args.undo_offset}: clock offset {after:+d} s (was {before:+d} s)")
        elif args.mark is not None or args.unmark is not None:
            folder = args.mark if args.mark is not None else args.unmark
            collection_id, relative = dep.mark_deployments(library, folder, args.mark is not None)
            state = "marked" if args.mark is not None else "no longer marked"
            print(f"{relative or 'the collection root'} is {state} as a tree of deployments")
        elif args.gap is not None:
            events = set_event_gap(library, args.gap)
            print(f"event gap {args.gap} s: {events} events")
        elif args.undated:
            return _print_undated(library, args.json)
        elif args.set_apart is not None or args.rejoin is not None:
            image_id = args.set_apart if args.set_apart is not None else args.rejoin
            event = set_apart(library, image_id, args.set_apart is not None)
            print(f"photo {image_id} is in event {event}")
        else:
            return _print_deployments(library, args.json, event_gap(library))
    return EXIT_OK


def _print_undated(library: Library, as_json: bool) -> int:
    from engine.indexing.deployments import undated_photos
    from engine.indexing.walk import printable_name

    undated = undated_photos(library)
    if as_json:
        print(json.dumps([{"path": path, "reason": why} for path, why in undated]))
        return EXIT_OK
    for path, why in undated:
        print(f"{printable_name(path)}: {why}")
    print(f"{_count(len(undated), 'photo')} without a capture time", file=sys.stderr)
    return EXIT_OK


def _print_deployments(library: Library, as_json: bool, gap: int) -> int:
    from engine.indexing.deployments import list_deployments
    from engine.indexing.walk import printable_name

    rows = list_deployments(library)
    if as_json:
        print(json.dumps({"event_gap_s": gap, "deployments": [d.to_json() for d in rows]}))
        return EXIT_OK
    for d in rows:
        span = (
            f"{d.first:%Y-%m-%d %H:%M} to {d.last:%Y-%m-%d %H:%M}"
            if d.first and d.last
            else "undated"
        )
        offset = f", clock {d.clock_offset_s:+d} s" if d.clock_offset_s else ""
        print(f"{d.id:4d}  {printable_name(d.name)}  {_count(d.photos, 'photo')}, {span}{offset}")
    print(f"{_count(len(rows), 'deployment')}; event gap {gap} s", file=sys.stderr)
    return EXIT_OK


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'s' * (number != 1)}"


# -- quadrat search --events ---------------------------------------------------------------


def add_search_event_options(p: argparse.ArgumentParser) -> None:
    """`--events` on `quadrat search`: one row per event rather than per photo."""
    p.add_argument(
        "--events",
        action="store_true",
        help="one result per event (a camera's burst), at its best frame, with its frame count",
    )


def search_depth(args: argparse.Namespace) -> int:
    """How many photos to rank for `--top` results: more when they are collapsed to events."""
    from engine.search.events import FRAMES_PER_EVENT

    return int(args.top) * (FRAMES_PER_EVENT if getattr(args, "events", False) else 1)


def event_results(
    library: Library, hits: list[SearchHit], args: argparse.Namespace
) -> list[tuple[EventHit, SearchHit]] | None:
    """With `--events`, the hits collapsed to the best `--top` events, each with its best
    frame's hit; else None."""
    if not getattr(args, "events", False):
        return None
    from engine.search.events import collapse_to_events

    by_id = {hit.image_id: hit for hit in hits}
    events = collapse_to_events(library, [(h.image_id, h.score) for h in hits], args.top)
    return [(event, by_id[event.image_id]) for event in events]


def print_event_results(
    rows: list[tuple[EventHit, SearchHit]], as_json: bool, extra: dict[str, str]
) -> None:
    """One line (or JSON object) per event: its id, best frame and frame count."""
    from engine.indexing.walk import printable_name

    for event, hit in rows:
        if as_json:
            line = {**event.to_json(), "path": hit.path, "rel_path": hit.rel_path}
            print(json.dumps({**line, "taxon": hit.taxon, **extra}))
        else:
            frames = f"{event.frames} frame{'s' * (event.frames != 1)}"
            print(f"{event.rank:4d}  {event.score:.4f}  event {event.event_id}  {frames}  "
                  f"{printable_name(hit.path)}")  # fmt: skip


COMMANDS = (
    Command(
        "deployments",
        help="list camera deployments; set a clock offset, the event gap, or mark a folder tree",
        description="A deployment is a camera at a place: made with no set-up from the EXIF "
        "camera serial and the collection's top folder, or from a folder tree marked as "
        "deployments. Frames of one camera at most the event gap apart form an event.",
        add_arguments=_arguments,
        run=cmd_deployments,
    ),
)
