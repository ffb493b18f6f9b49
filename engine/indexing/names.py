"""Taxa from names: `TaxonInfo`, and the taxonomy iNat21/iNat24 folder names spell out
(`parse_inat_dirname`, `taxon_for_path`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import PurePosixPath


@dataclass(frozen=True)
class TaxonInfo:
    """Taxonomy of one photo's subject, from a folder name or a COCO category."""

    name: str  # scientific name, "Genus epithet", or the deepest rank known
    kingdom: str | None
    phylum: str | None
    class_: str | None
    order: str | None
    family: str | None
    genus: str | None
    specific_epithet: str | None
    common_name: str | None = None
    category_id: int | None = None  # iNat category number (folder prefix or COCO id)
    image_dir_name: str | None = None


# Rank names are capitalised words (a few genera carry a hyphen, e.g. Pseudo-nitzschia);
# epithets are lower case and may be hyphenated (novae-angliae). The strict shape keeps
# ordinary folders such as "2021_05_03_trip_..." from passing for taxa.
_RANK_RE = re.compile(r"[A-Z][A-Za-z-]*\Z")
_EPITHET_RE = re.compile(r"[a-z][a-z-]*\Z")


@lru_cache(maxsize=65_536)
def parse_inat_dirname(name: str) -> TaxonInfo | None:
    """Parse `NNNNN_Kingdom_Phylum_Class_Order_Family_Genus_epithet`; None for anything else."""
    fields = name.split("_")
    if len(fields) != 8:
        return None
    number, *ranks, epithet = fields
    if not number.isascii() or not number.isdigit():
        return None
    if not all(_RANK_RE.match(rank) for rank in ranks) or not _EPITHET_RE.match(epithet):
        return None
    kingdom, phylum, class_, order, family, genus = ranks
    return TaxonInfo(
        name=f"{genus} {epithet}",
        kingdom=kingdom,
        phylum=phylum,
        class_=class_,
        order=order,
        family=family,
        genus=genus,
        specific_epithet=epithet,
        category_id=int(number),
        image_dir_name=name,
    )


def taxon_for_path(rel_path: str) -> TaxonInfo | None:
    """Taxonomy from the nearest parent folder of `rel_path` whose name parses as an iNat taxon."""
    for folder in reversed(PurePosixPath(rel_path).parent.parts):
        taxon = parse_inat_dirname(folder)
        if taxon is not None:
            return taxon
    return None
