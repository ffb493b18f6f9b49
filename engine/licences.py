"""Licences as data: one table of the licences photos carry, and one reading of what a record
says into an entry of it (`read_licence`). The importer, the licence filter and every export
use it, so a photo the filter calls CC BY is exported as CC BY, with its URI.

What is recognised, and how:
- Creative Commons URLs (`creativecommons.org/licenses/by-nc/4.0/`, with or without
  `legalcode`, a jurisdiction port such as `/3.0/de/`, http or https), the CC0 dedication
  (`/publicdomain/zero/1.0/`) and the Public Domain Mark (`/publicdomain/mark/1.0/`);
- SPDX identifiers (`CC-BY-NC-4.0`, `CC0-1.0`) and the short codes iNaturalist and people use
  (`cc-by-nc`, `CC BY-NC 4.0`, `cc_by`, `CC0`);
- licence names in words, as iNaturalist's and COCO's metadata list them ("Attribution
  License", "Attribution-NonCommercial-ShareAlike License", "Creative Commons Attribution 4.0
  International", "Public Domain Dedication" for CC0, "Public Domain Mark");
- "all rights reserved", "©", "(c)": a known licence that allows no reuse.

CC0 (a dedication: the author waives every right) and the Public Domain Mark (a label for a work
already free of known copyright) are different legal instruments and are kept apart: GBIF
accepts CC0 as a dataset licence, never the mark. A Creative Commons name given without a
version ("Attribution License") is read as version 4.0, the version iNaturalist's names stand
for; `version_assumed` says so. Anything else is unrecognised: exports never assume permission
they were not given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The Creative Commons licence elements in the order their codes are written: by-nc-sa.
_ELEMENT_ORDER = ("by", "nc", "nd", "sa")
_ELEMENT_WORDS = {
    "by": "by",
    "attribution": "by",
    "nc": "nc",
    "noncommercial": "nc",
    "nd": "nd",
    "noderivs": "nd",
    "noderivatives": "nd",
    "sa": "sa",
    "sharealike": "sa",
}
_ELEMENT_TITLES = {
    "by": "Attribution",
    "nc": "NonCommercial",
    "nd": "NoDerivatives",
    "sa": "ShareAlike",
}
# Words that name no element: "Creative Commons Attribution 4.0 International License".
_NOISE = {
    "cc", "creative", "commons", "license", "licence", "licensed", "international", "generic",
    "unported", "version", "v", "the", "under", "a", "an", "of", "deed", "legalcode", "legal",
    "code", "http", "https", "www", "org", "creativecommons", "licenses",
}  # fmt: skip
_VERSIONS = ("1.0", "2.0", "2.5", "3.0", "4.0")
DEFAULT_CC_VERSION = "4.0"

CC0_URL = "http://creativecommons.org/publicdomain/zero/1.0/legalcode"
PDM_URL = "http://creativecommons.org/publicdomain/mark/1.0/"
# The licences GBIF accepts for a dataset (its IPT offers exactly these three).
GBIF_DATASET_CODES = frozenset({"CC0-1.0", "CC-BY-4.0", "CC-BY-NC-4.0"})

# The families a licence filter offers, besides a CC family's own code ("cc-by-nc").
FAMILY_CC0 = "cc0"
FAMILY_PDM = "pdm"
FAMILY_RESERVED = "all-rights-reserved"


@dataclass(frozen=True)
class Licence:
    """One licence as Quadrat treats it.

    `code` is SPDX's identifier where SPDX has one ("CC-BY-NC-4.0", "CC0-1.0"), "PDM-1.0" for
    the Public Domain Mark, "ARR" for all rights reserved, "" when the text was not recognised.
    `family` is what the licence filter groups by: "cc-by-nc" whatever the version, "cc0",
    "pdm", "all-rights-reserved", else the recorded text in lower case ("" for none)."""

    code: str
    family: str
    title: str
    url: str
    text: str
    reusable: bool = False
    non_commercial: bool = False
    public_domain: bool = False
    version_assumed: bool = False

    @property
    def recognised(self) -> bool:
        return bool(self.code)

    @property
    def gbif_dataset_licence(self) -> bool:
        """Whether GBIF accepts this licence for a whole dataset."""
        return self.code in GBIF_DATASET_CODES

    @property
    def value(self) -> str:
        """What a `license` column carries: the URI where known (as GBIF asks), else the text."""
        return self.url or self.text

    @property
    def label(self) -> str:
        """How the licence reads on screen: "CC BY-NC 4.0", "CC0 1.0", else the text."""
        return self.title or self.text or "unknown"


def _creative_commons(elements: set[str], version: str | None, text: str) -> Licence | None:
    """The CC licence of `elements` (must hold "by"; ND and SA never together)."""
    if "by" not in elements or {"nd", "sa"} <= elements:
        return None
    ordered = [e for e in _ELEMENT_ORDER if e in elements]
    chosen = version if version in _VERSIONS else DEFAULT_CC_VERSION
    joined = "-".join(ordered)
    return Licence(
        code=f"CC-{joined.upper()}-{chosen}",
        family=f"cc-{joined}",
        title=f"CC {joined.upper()} {chosen}",
        url=f"http://creativecommons.org/licenses/{joined}/{chosen}/legalcode",
        text=text,
        reusable=True,
        non_commercial="nc" in elements,
        version_assumed=version is None,
    )


def _cc0(text: str) -> Licence:
    return Licence(
        "CC0-1.0", FAMILY_CC0, "CC0 1.0", CC0_URL, text, reusable=True, public_domain=True
    )


def _pdm(text: str) -> Licence:
    return Licence(
        "PDM-1.0", FAMILY_PDM, "Public Domain Mark 1.0", PDM_URL, text, True, public_domain=True
    )


_URL = re.compile(
    r"creativecommons\.org/(licenses|publicdomain)/([a-z-]+)(?:/(\d\.\d))?", re.IGNORECASE
)
_SPDX = re.compile(r"^cc-(by(?:-(?:nc|nd|sa))*)-(\d\.\d)$")
_VERSION = re.compile(r"(?<![\d.])(\d\.\d)(?![\d.])")


def read_licence(text: str | None) -> Licence:
    """The `Licence` a record's licence text (a URL, a code or a name) stands for."""
    words = " ".join(str(text or "").split())
    lowered = words.lower()
    if not lowered:
        return Licence("", "", "", "", "")
    url = _URL.search(lowered)
    if url is not None:
        return _from_url(url, words) or _unrecognised(words)
    spdx = _SPDX.match(lowered)
    if spdx is not None:
        found = _creative_commons(set(spdx.group(1).split("-")), spdx.group(2), words)
        return found or _unrecognised(words)
    if "all rights reserved" in lowered or lowered in ("©", "(c)", "copyright"):
        return Licence("ARR", FAMILY_RESERVED, "All rights reserved", "", words)
    return _from_words(lowered, words)


def _from_url(url: re.Match[str], words: str) -> Licence | None:
    kind, path, version = url.group(1), url.group(2), url.group(3)
    if kind == "publicdomain":
        if path == "zero":
            return _cc0(words)
        if path == "mark":
            return _pdm(words)
        return None
    parts = path.split("-")
    if not all(part in _ELEMENT_ORDER for part in parts):
        return None
    return _creative_commons(set(parts), version, words)


def _from_words(lowered: str, words: str) -> Licence:
    joined = re.sub(r"non[\s_-]*commercial", "noncommercial", lowered)
    joined = re.sub(r"share[\s_-]*alike", "sharealike", joined)
    joined = re.sub(r"no[\s_-]*deriv(?:ative)?s?", "noderivs", joined)
    joined = re.sub(r"public[\s_-]*domain", "publicdomain", joined)
    joined = re.sub(r"\bcc[\s_-]*(?:0|zero)\b", "cc0", joined)
    tokens = re.findall(r"[a-z0-9]+", _VERSION.sub(" ", joined))
    found = _VERSION.search(joined)
    version = found.group(1) if found else None
    meaningful = [t for t in tokens if t not in _NOISE and not t.isdigit()]
    if "cc0" in tokens or ("publicdomain" in tokens and "dedication" in tokens):
        return _cc0(words)
    if "publicdomain" in tokens or meaningful == ["pdm"]:
        return _pdm(words)
    if meaningful and all(t in _ELEMENT_WORDS for t in meaningful):
        licence = _creative_commons({_ELEMENT_WORDS[t] for t in meaningful}, version, words)
        if licence is not None:
            return licence
    return _unrecognised(words)


def _unrecognised(words: str) -> Licence:
    return Licence("", words.lower(), "", "", words)


def licence_family(text: str | None) -> str | None:
    """The filter's code for a licence text ("cc-by-nc", "cc0", "pdm"), None for no text."""
    family = read_licence(text).family
    return family or None


def family_label(family: str) -> str:
    """How a filter code reads on screen: "cc-by-nc" -> "CC BY-NC", "cc0" -> "CC0"."""
    if family == FAMILY_CC0:
        return "CC0"
    if family == FAMILY_PDM:
        return "Public Domain Mark"
    if family == FAMILY_RESERVED:
        return "All rights reserved"
    if family.startswith("cc-"):
        return "CC " + family[3:].upper()
    return family


def element_title(licence: Licence) -> str:
    """The licence's long name ("Creative Commons Attribution-NonCommercial 4.0"), for EML."""
    if licence.family.startswith("cc-"):
        elements = licence.family[3:].split("-")
        version = licence.code.rsplit("-", 1)[-1]
        names = "-".join(_ELEMENT_TITLES[e] for e in elements)
        return f"Creative Commons {names} {version}"
    return licence.label


def licence_display(text: str | None) -> str | None:
    """A photo's licence for the detail pane: the licence's short title where recognised
    ("CC BY-NC 4.0", with "(version assumed)" when the record named no version), else the
    recorded text."""
    if not text or not text.strip():
        return None
    licence = read_licence(text)
    if not licence.recognised:
        return licence.text
    return licence.title + (" (version assumed)" if licence.version_assumed else "")
