"""The dataset's metadata, `eml.xml`, in EML 2.1.1 as GBIF's metadata profile 1.2 defines it
(http://rs.gbif.org/schema/eml-gbif-profile/1.2/eml.xsd), and a pre-flight check of it.

The check (`check_eml`) holds the profile's rules for the elements Quadrat writes, in code: the
root's attributes, which of the dataset's children are required, their order, how often each
may occur, and their types (a year or date for `pubDate`, a date-time for `dateStamp`, text
that is not empty where the profile says so, one paragraph of intellectual rights with at
most one link, method steps and quality control as descriptions of paragraphs). An element
the profile does not allow where it stands is an error too. The profile's schema itself is not
shipped with Quadrat.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from datetime import date, datetime
from xml.etree import ElementTree as ET

EML_NAMESPACE = "eml://ecoinformatics.org/eml-2.1.1"
EML_SCHEMA = "http://rs.gbif.org/schema/eml-gbif-profile/1.2/eml.xsd"
_XSI = "http://www.w3.org/2001/XMLSchema-instance"
_XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"


@dataclass
class Provenance:
    """How the records were found, judged and published: the dataset's methods in eml.xml."""

    query_id: int
    query_text: str
    query_name: str
    runs: list[str] = field(default_factory=list)  # one line per saved run
    models: list[str] = field(default_factory=list)
    judges: list[str] = field(default_factory=list)
    version: str = ""
    adjudicated: int = 0  # photos whose judgment settles a disagreement among judges
    places: list[str] = field(default_factory=list)  # how places were published
    quality: list[str] = field(default_factory=list)  # precision and recall, one per line


def eml_xml(
    prov: Provenance,
    licence: tuple[str, str],
    creator: str,
    records: int,
    today: date,
    stamp: datetime,
) -> bytes:
    """The dataset's metadata: title, creator, licence, the methods (query, search runs with
    method, model and parameters, judges, how places were published, Quadrat's version) and
    the quality control (the package's precision and recall). `stamp` is the metadata's
    date-time (`dateStamp`, with its UTC offset)."""
    ET.register_namespace("eml", EML_NAMESPACE)
    ET.register_namespace("xsi", _XSI)
    package = f"urn:uuid:{uuid.uuid4()}"
    root = ET.Element(
        f"{{{EML_NAMESPACE}}}eml",
        {
            f"{{{_XSI}}}schemaLocation": f"{EML_NAMESPACE} {EML_SCHEMA}",
            "packageId": package,
            "system": "http://gbif.org",
            "scope": "system",
            _XML_LANG: "en",
        },
    )
    dataset = ET.SubElement(root, "dataset")
    ET.SubElement(dataset, "alternateIdentifier").text = package
    title = prov.query_name or prov.query_text
    ET.SubElement(
        dataset, "title", {_XML_LANG: "en"}
    ).text = f"Photos of {title!s} found and judged with Quadrat"
    for role in ("creator", "metadataProvider"):
        _person(ET.SubElement(dataset, role), creator)
    ET.SubElement(dataset, "pubDate").text = today.isoformat()
    ET.SubElement(dataset, "language").text = "en"
    abstract = ET.SubElement(dataset, "abstract")
    ET.SubElement(abstract, "para").text = (
        f"{records:,} occurrences, one per photo judged relevant for the query "
        f'"{prov.query_text}" in a local photo collection searched with Quadrat '
        f"{prov.version}. Each photo is in the multimedia extension with its own licence; "
        "how each record was judged is in the measurement or fact extension."
    )
    uri, name = licence
    rights = ET.SubElement(ET.SubElement(dataset, "intellectualRights"), "para")
    rights.text = "This work is licensed under a "
    link = ET.SubElement(rights, "ulink", {"url": uri})
    ET.SubElement(link, "citetitle").text = f"{name} License"
    link.tail = "."
    _person(ET.SubElement(dataset, "contact"), creator)
    methods = ET.SubElement(dataset, "methods")
    for text in _method_steps(prov):
        _description(ET.SubElement(methods, "methodStep"), [text])
    if prov.quality:
        _description(ET.SubElement(methods, "qualityControl"), prov.quality)
    extra = ET.SubElement(
        ET.SubElement(ET.SubElement(root, "additionalMetadata"), "metadata"), "gbif"
    )
    ET.SubElement(extra, "dateStamp").text = stamp.isoformat(timespec="seconds")
    ET.SubElement(extra, "hierarchyLevel").text = "dataset"
    ET.indent(root)
    return bytes(ET.tostring(root, encoding="utf-8", xml_declaration=True)) + b"\n"


def _person(element: ET.Element, name: str) -> None:
    ET.SubElement(ET.SubElement(element, "individualName"), "surName").text = name


def _description(element: ET.Element, paragraphs: list[str]) -> None:
    described = ET.SubElement(element, "description")
    for text in paragraphs:
        ET.SubElement(described, "para").text = text


def _method_steps(prov: Provenance) -> list[str]:
    adjudicated = prov.adjudicated
    return [
        f'Query: "{prov.query_text}"'
        + (f' (saved as "{prov.query_name}")' if prov.query_name else "")
        + f", saved query {prov.query_id}.",
        *(f"Search run: {line}." for line in prov.runs),
        "Models: " + (", ".join(prov.models) or "none recorded") + ".",
        "Judged relevant by: " + (", ".join(prov.judges) or "not recorded") + ".",
        *(
            [
                "Where judges disagreed, an adjudicated judgment settled "
                f"{adjudicated} photo{'s' * (adjudicated != 1)}."
            ]
            if adjudicated
            else []
        ),
        *prov.places,
        f"Exported with Quadrat {prov.version}; taxon, date and place are those of each "
        "photo's own record; attributes (behavior, lifeStage, ...) as the judges set them.",
    ]


# --- the profile's rules, for what Quadrat writes ------------------------------------------------

# The dataset's children in the order the profile's sequence gives them: (name, required,
# may repeat).
_DATASET = (
    ("alternateIdentifier", False, True),
    ("title", True, True),
    ("creator", True, True),
    ("metadataProvider", False, True),
    ("associatedParty", False, True),
    ("pubDate", True, False),
    ("language", False, False),
    ("abstract", True, False),
    ("keywordSet", False, True),
    ("additionalInfo", False, False),
    ("intellectualRights", False, False),
    ("distribution", False, False),
    ("coverage", False, False),
    ("purpose", False, False),
    ("maintenance", False, False),
    ("contact", True, True),
    ("methods", False, False),
    ("project", False, False),
)
_AGENTS = ("creator", "metadataProvider", "contact")
_AGENT_NAMES = ("organizationName", "individualName", "positionName")
_GBIF = ("dateStamp", "hierarchyLevel", "citation", "bibliography", "physical",
         "resourceLogoUrl", "collection", "formationPeriod", "specimenPreservationMethod",
         "livingTimePeriod", "jgtiCuratorialUnit")  # fmt: skip
_YEAR = re.compile(r"-?\d{4,}(?:Z|[+-]\d{2}:\d{2})?")
_DATE = re.compile(r"-?(\d{4,})-(\d{2})-(\d{2})(?:Z|[+-]\d{2}:\d{2})?")
_DATE_TIME = re.compile(
    r"-?(\d{4,})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})?"
)


def is_year_or_date(text: str) -> bool:
    """The profile's `yearDate`: an xs:gYear ("2024") or an xs:date ("2024-05-01")."""
    text = text.strip()
    if _YEAR.fullmatch(text):
        return True
    found = _DATE.fullmatch(text)
    return found is not None and _real_date(*found.groups())


def is_date_time(text: str) -> bool:
    """An xs:dateTime: "2024-05-01T12:00:00", with an optional fraction and UTC offset."""
    found = _DATE_TIME.fullmatch(text.strip())
    if found is None or not _real_date(*found.groups()[:3]):
        return False
    hour, minute, second = (int(v) for v in found.groups()[3:])
    return (hour < 24 and minute < 60 and second < 60) or (hour, minute, second) == (24, 0, 0)


def _real_date(year: str, month: str, day: str) -> bool:
    try:
        date(int(year), int(month), int(day))
    except ValueError:
        return False
    return True


def _text(element: ET.Element | None) -> str:
    return "".join(element.itertext()).strip() if element is not None else ""


def check_eml(data: bytes) -> list[str]:
    """What in `data` breaks GBIF's EML profile 1.2, for the elements Quadrat writes (empty:
    nothing found). See the module docstring for what is checked."""
    try:
        root = ET.fromstring(data)
    except ET.ParseError as error:
        return [f"eml.xml is not well-formed XML: {error}"]
    found: list[str] = []
    if root.tag != f"{{{EML_NAMESPACE}}}eml":
        return [f"eml.xml: the root element is {root.tag}, not eml in {EML_NAMESPACE}"]
    for attribute in ("packageId", "system"):
        if not root.get(attribute, "").strip():
            found.append(f"eml.xml: the eml element needs a {attribute}")
    if root.get("scope") != "system":
        found.append('eml.xml: the eml element\'s scope must be "system"')
    children = [child.tag for child in root]
    if children not in (["dataset"], ["dataset", "additionalMetadata"]):
        found.append(
            "eml.xml: eml holds dataset, then optionally additionalMetadata, not "
            + ", ".join(children)
        )
    dataset = root.find("dataset")
    if dataset is not None:
        found.extend(_check_dataset(dataset))
    extra = root.find("additionalMetadata")
    if extra is not None:
        found.extend(_check_gbif(extra))
    return found


def _check_dataset(dataset: ET.Element) -> list[str]:
    found = _check_dataset_children(dataset)
    for title in dataset.findall("title"):
        if not _text(title):
            found.append("eml.xml: an empty title")
    for role in _AGENTS:
        for agent in dataset.findall(role):
            found.extend(_check_agent(role, agent))
    pub = dataset.find("pubDate")
    if pub is not None and not is_year_or_date(_text(pub)):
        found.append(f"eml.xml: pubDate {_text(pub)!r} is not a year or a date")
    language = dataset.find("language")
    if language is not None and not _text(language):
        found.append("eml.xml: an empty language")
    abstract = dataset.find("abstract")
    if abstract is not None and (not len(abstract) or any(c.tag != "para" for c in abstract)):
        found.append("eml.xml: the abstract holds paragraphs (para) only, at least one")
    rights = dataset.find("intellectualRights")
    if rights is not None:
        found.extend(_check_rights(rights))
    methods = dataset.find("methods")
    if methods is not None:
        found.extend(_check_methods(methods))
    return found


def _check_dataset_children(dataset: ET.Element) -> list[str]:
    """The dataset's elements against the profile: known ones, in its order, the required
    ones there, the single ones once."""
    found: list[str] = []
    order = {name: index for index, (name, _, _) in enumerate(_DATASET)}
    last = -1
    counts: dict[str, int] = {}
    for child in dataset:
        tag = str(child.tag)
        if tag not in order:
            found.append(f"eml.xml: dataset may not hold {tag}")
            continue
        if order[tag] < last:
            found.append(f"eml.xml: dataset's {tag} comes too late (the profile's order)")
        last = max(last, order[tag])
        counts[tag] = counts.get(tag, 0) + 1
    for name, required, repeats in _DATASET:
        if required and not counts.get(name):
            found.append(f"eml.xml: dataset needs a {name}")
        if not repeats and counts.get(name, 0) > 1:
            found.append(f"eml.xml: dataset holds {name} only once")
    return found


def _check_agent(role: str, agent: ET.Element) -> list[str]:
    tags = [child.tag for child in agent]
    if not tags or tags[0] not in _AGENT_NAMES:
        return [f"eml.xml: {role} starts with an organizationName, individualName or positionName"]
    found = []
    for name in agent.findall("individualName"):
        parts = [child.tag for child in name]
        if parts not in (["surName"], ["givenName", "surName"]):
            found.append(f"eml.xml: {role}'s individualName is [givenName] surName")
        if not _text(name.find("surName")):
            found.append(f"eml.xml: {role}'s surName is empty")
    return found


def _check_rights(rights: ET.Element) -> list[str]:
    paragraphs = list(rights)
    if len(paragraphs) != 1 or paragraphs[0].tag != "para":
        return ["eml.xml: intellectualRights holds exactly one para"]
    links = list(paragraphs[0])
    if len(links) > 1 or any(link.tag != "ulink" for link in links):
        return ["eml.xml: the intellectualRights para holds at most one ulink"]
    for link in links:
        if not link.get("url", "").strip():
            return ["eml.xml: the licence link needs its url"]
        titles = list(link)
        if len(titles) != 1 or titles[0].tag != "citetitle" or not _text(titles[0]):
            return ["eml.xml: the licence link needs one citetitle, not empty"]
    return []


def _check_methods(methods: ET.Element) -> list[str]:
    found: list[str] = []
    tags = [str(child.tag) for child in methods]
    if not tags or tags[0] != "methodStep":
        found.append("eml.xml: methods start with a methodStep")
    for before, after in zip(tags, tags[1:], strict=False):
        if before == "qualityControl" and after not in ("qualityControl", "methodStep"):
            found.append(f"eml.xml: methods' {after} cannot follow qualityControl")
        if before == "sampling" and after == "sampling":
            found.append("eml.xml: methods' sampling follows a methodStep")
    for child in methods:
        if child.tag not in ("methodStep", "sampling", "qualityControl"):
            found.append(f"eml.xml: methods may not hold {child.tag}")
            continue
        if child.tag == "sampling":
            continue
        parts = list(child)
        if len(parts) != 1 or parts[0].tag != "description":
            found.append(f"eml.xml: a {child.tag} holds one description")
        elif any(p.tag != "para" for p in parts[0]):
            found.append(f"eml.xml: a {child.tag}'s description holds paragraphs only")
    return found


def _check_gbif(extra: ET.Element) -> list[str]:
    metadata = list(extra)
    if len(metadata) != 1 or metadata[0].tag != "metadata":
        return ["eml.xml: additionalMetadata holds one metadata element"]
    gbif = list(metadata[0])
    if len(gbif) != 1 or gbif[0].tag != "gbif":
        return ["eml.xml: additionalMetadata's metadata holds one gbif element"]
    found: list[str] = []
    tags = [str(child.tag) for child in gbif[0]]
    if not tags or tags[0] != "dateStamp":
        found.append("eml.xml: gbif metadata starts with its dateStamp")
    order = {name: index for index, name in enumerate(_GBIF)}
    known = [order[t] for t in tags if t in order]
    if known != sorted(known):
        found.append("eml.xml: gbif metadata's elements are out of the profile's order")
    stamp = gbif[0].find("dateStamp")
    if stamp is not None and not is_date_time(_text(stamp)):
        found.append(
            f"eml.xml: dateStamp {_text(stamp)!r} is not a date-time "
            "(such as 2024-05-01T12:00:00+00:00)"
        )
    level = gbif[0].find("hierarchyLevel")
    if level is not None and not _text(level):
        found.append("eml.xml: an empty hierarchyLevel")
    return found
