"""What one indexing run did: `IndexReport` (the counts of `quadrat index --json` and the lines
the command and the window show) and `SkippedFile`, a file left out with its reason."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.indexing.metadata import ignored_metadata_line


@dataclass(frozen=True)
class SkippedFile:
    """A file or folder the run left out, and why (a skip reason, one line)."""

    path: str
    reason: str


@dataclass
class IndexReport:
    """What one indexing run did. Counts follow docs/SPEC.md §5.3 (`quadrat index --json`)."""

    collection: str
    total_files: int = 0
    indexed: int = 0  # encoded in this run: new, changed, or pending for this model
    unchanged: int = 0  # already indexed and untouched (moved and returned files included)
    moved: int = 0  # renamed or moved files recognised by content, vectors kept
    returned: int = 0  # photos that were missing and came back: their id and judgments too
    missing: int = 0  # went missing from disk in this run: kept, with their judgments
    still_missing: int = 0  # photos of the collection missing from disk after the run
    judgments_on_missing: int = 0  # judgments kept on those photos
    removed: int = 0  # missing photos forgotten in this run (only with `prune`)
    relocated_from: str | None = None  # the collection's old root, when it was moved here
    metadata_problems: int = 0  # metadata records whose unusable values were ignored
    metadata_values_ignored: int = 0  # impossible values dropped (latitude "north", month 13)
    metadata_records_ignored: int = 0  # records skipped whole (not an object, no file_name)
    metadata_examples: list[str] = field(default_factory=list)  # the first few, also logged
    skipped: list[SkippedFile] = field(default_factory=list)  # each a catalog row, skipped
    # Found but given no catalog row: links leading out of the collection, names that are not
    # valid Unicode, unreadable folders (their paths printable, see `walk.printable_name`).
    passed_over: list[SkippedFile] = field(default_factory=list)
    cancelled: bool = False
    seconds: float = 0.0
    # Read back from the catalog after the last checkpoint, not counted along the way.
    catalog_indexed: int = 0
    catalog_skipped: int = 0
    # What the photos' EXIF gave and dropped, deployments and events (`CameraTally.to_json`).
    camera: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "collection": self.collection,
            "indexed": self.indexed,
            "skipped": [{"path": s.path, "reason": s.reason} for s in self.all_skipped()],
            "unchanged": self.unchanged,
            "removed": self.removed,
            "moved": self.moved,
            "returned": self.returned,
            "missing": self.missing,
            "still_missing": self.still_missing,
            "judgments_on_missing": self.judgments_on_missing,
            "relocated_from": self.relocated_from,
            "metadata_problems": self.metadata_problems,
            "metadata_values_ignored": self.metadata_values_ignored,
            "metadata_records_ignored": self.metadata_records_ignored,
            "metadata_examples": list(self.metadata_examples),
            "catalog": {"indexed": self.catalog_indexed, "skipped": self.catalog_skipped},
            "camera": dict(self.camera),
            "total_files": self.total_files,
            "cancelled": self.cancelled,
            "seconds": round(self.seconds, 3),
        }

    def summary(self) -> str:
        state = "cancelled" if self.cancelled else "done"
        parts = [
            f"{state}: {self.indexed} indexed, {self.unchanged} unchanged, {self.moved} moved",
        ]
        if self.returned:
            parts.append(f"{self.returned} came back")
        if self.removed:
            parts.append(f"{self.removed} missing forgotten")
        parts.append(f"{len(self.skipped) + len(self.passed_over)} skipped ({self.seconds:.1f} s)")
        lines = [", ".join(parts)]
        if self.relocated_from:
            lines.append(
                f"the collection moved from {self.relocated_from}: its photos, ids and "
                "judgments followed it"
            )
        if self.still_missing:
            lines.append(missing_photos_line(self.still_missing, self.judgments_on_missing))
        if self.metadata_problems:
            lines.append(f"{self.metadata_line()} (examples in the log)")
        lines.extend(self.camera_lines())
        return "\n".join(lines)

    def camera_lines(self) -> list[str]:
        """What the EXIF held that was dropped (undated photos, GPS of (0, 0), serials that
        change inside a folder), one line each; none when nothing was."""
        from engine.indexing.deployments import CameraTally

        tally = CameraTally(**{k: v for k, v in self.camera.items() if isinstance(v, int)})
        return tally.lines()

    def all_skipped(self) -> list[SkippedFile]:
        """Every file or folder the run left out, with its reason: the catalog's skipped
        photos, then what the walk passed over."""
        return [*self.skipped, *self.passed_over]

    def metadata_line(self) -> str:
        """How much of the metadata file was ignored, in words ("" when nothing was)."""
        if not self.metadata_problems:
            return ""
        line = ignored_metadata_line(self.metadata_values_ignored, self.metadata_records_ignored)
        # A tally from an older reader may lack the split: the record count still says it.
        return line or f"{self.metadata_problems} metadata records had values that were ignored"

    def status_line(self) -> str:
        """The summary in one short line, for a status bar."""
        line = self.summary().splitlines()[0]
        if self.relocated_from:
            line += f"; moved from {self.relocated_from}"
        if self.still_missing:
            line += f"; {self.still_missing} missing from disk (judgments kept)"
        if self.metadata_problems:
            line += f"; {self.metadata_line()} (examples in the log)"
        return line


def missing_photos_line(missing: int, judgments: int) -> str:
    """One line telling the user that photos are gone from disk and nothing of them is lost."""
    kept = f"their {judgments} judgments are kept" if judgments else "they are kept"
    return (
        f"{missing} photos are missing from disk and left out of search; {kept} and come back "
        "with the files (quadrat forget drops them for good)"
    )
