"""The export formats written before the registry, as registry entries (`engine/io/formats.py`).

Each writer is the format's own engine function behind a small adapter, so a script runs any of
them as `get_format(name).run(library, query_id, out, **options)`. Their command lines stay
their own (`app/cli/export*.py`: several queries, `--check`, problems listed), and so do their
window actions, so none has a File › Export label. Writers import what they need when they run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.io.formats import BESIDE, FILE, FOLDER, SENSITIVE_TAXA, ExportFormat, FormatOption

if TYPE_CHECKING:
    from engine.catalog.library import Library
    from engine.io.formats import ExportReport


@dataclass(frozen=True)
class Said:
    """A report that is its summary line (for writers that return a count or several lines)."""

    text: str

    def summary(self) -> str:
        return self.text


INCLUDE_RESTRICTED = FormatOption(
    "--include-restricted",
    "include photos whose licence does not allow reuse",
    dest="include_restricted",
    switch=True,
)
WRITE_ANYWAY = FormatOption(
    "--write-anyway", "write even when the check finds errors", dest="write_anyway", switch=True
)
MEDIA_URL = FormatOption(
    "--media-url", "where the photos will be published", dest="media_url", metavar="URL"
)


def _judgments(
    library: Library, query_id: int, out: Path, *, fmt: str = "csv", view: str = "newest"
) -> ExportReport:
    from engine.io.export import export_judgments

    rows = export_judgments(library, out, [query_id], fmt=fmt, view=view)
    return Said(f"{rows} judgments written to {out}")


def _relevant_photos(
    library: Library, query_id: int, out: Path, *, sensitive_taxa: bool = True
) -> ExportReport:
    from engine.io.photo_copies import copy_relevant_photos

    copied = copy_relevant_photos(library, query_id, out, sensitive_taxa=sensitive_taxa)
    return Said(copied.summary(out))


def _xmp(
    library: Library, query_id: int, out: Path | None, *, mirror: Path | None = None
) -> ExportReport:
    from engine.io.xmp import write_sidecars

    return Said(write_sidecars(library, query_id, mirror=mirror).lines()[0])


def _dwca(library: Library, query_id: int, out: Path, **options: Any) -> ExportReport:
    from engine.io.dwc import export_dwca

    return export_dwca(library, query_id, out, **options)


def _dwc_csv(library: Library, query_id: int, out: Path, **options: Any) -> ExportReport:
    from engine.io.dwc import export_dwc_csv

    return export_dwc_csv(library, query_id, out, **options)


def _camtrap_dp(
    library: Library,
    query_id: int,
    out: Path,
    *,
    write_anyway: bool = False,
    **options: Any,
) -> ExportReport:
    from engine.io.camtrap_dp import export_checked
    from engine.io.camtrap_tables import Options

    report, _check = export_checked(
        library, query_id, out, Options.of(**options), write_anyway=write_anyway
    )
    return report


_DWC_OPTIONS = (INCLUDE_RESTRICTED, MEDIA_URL, SENSITIVE_TAXA, WRITE_ANYWAY)

JUDGMENTS = ExportFormat(
    "judgments",
    "the judgments of saved queries (CSV or TREC qrels)",
    FILE,
    ".csv",
    options=(
        FormatOption("--format", "csv or qrels", dest="fmt"),
        FormatOption(
            "--judge", "whose judgments: newest, majority, adjudicated or a judge", dest="view"
        ),
    ),
    write=_judgments,
)
RELEVANT_PHOTOS = ExportFormat(
    "relevant-photos",
    "copies of a query's relevant photos, GPS removed where their place is withheld",
    FOLDER,
    options=(SENSITIVE_TAXA,),
    write=_relevant_photos,
)
XMP = ExportFormat(
    "xmp",
    "judgments and attributes as keywords in the photos' XMP sidecars",
    BESIDE,
    options=(FormatOption("--mirror", "where sidecars of read-only folders go", dest="mirror"),),
    write=_xmp,
)
DWCA = ExportFormat(
    "dwca",
    "a Darwin Core Archive of a query's relevant photos, for GBIF",
    FILE,
    ".zip",
    options=_DWC_OPTIONS,
    write=_dwca,
)
DWC_CSV = ExportFormat(
    "dwc-csv",
    "Darwin Core records of a query's relevant photos as CSV",
    FILE,
    ".csv",
    options=_DWC_OPTIONS,
    write=_dwc_csv,
)
CAMTRAP_DP = ExportFormat(
    "camtrap-dp",
    "a Camtrap DP package of a query's judged camera-trap events",
    FOLDER,
    options=(
        INCLUDE_RESTRICTED,
        SENSITIVE_TAXA,
        WRITE_ANYWAY,
        FormatOption("--scientific-name", "the observations' taxon", dest="scientific_name"),
        FormatOption("--timezone", "the frames' time zone", dest="timezone"),
    ),
    write=_camtrap_dp,
)
