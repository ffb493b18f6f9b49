"""The Darwin Core terms a judgment can carry: one table of each term's name (as files write
it), its label (as the window and the command line show it) and its suggested values.

Every place that names a term reads it here: the detail pane and the presets dialog
(`app/controllers/attributes.py`), the agreement and attribute-question dialogs, `quadrat
agreement` and `quadrat attributes terms`, the judgments CSV and the Darwin Core writers. A
label is Darwin Core's own English label (the TDWG term list's, in sentence case), and a
caption names the term itself wherever the label does not ("Life stage (lifeStage)"), so what
the window shows maps to a file's column at a glance.

Vocabularies are suggestions, never limits: a value outside one is kept as typed and flagged
(`engine.judgments.attributes.off_vocabulary`), and values stored by earlier versions stay
valid whatever the lists below say. Values are lower case, as Darwin Core examples write them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AttributeTerm:
    """One Darwin Core term a judgment can carry."""

    term: str  # the Darwin Core name, as files write it
    label: str  # Darwin Core's English label, in sentence case
    vocabulary: tuple[str, ...] = ()  # suggested values; none: free text
    source: str = ""  # where the suggested values come from
    hint: str = ""  # an example shown while a free-text field is empty

    @property
    def caption(self) -> str:
        """The label, naming the term where the label's words are not the term itself."""
        if self.label.casefold() == self.term.casefold():
            return self.label
        return f"{self.label} ({self.term})"


# Life stages across kingdoms. Two sources, both looked up for this list:
# - iNaturalist's Life Stage annotation (help.inaturalist.org, "What are the definitions of
#   iNaturalist annotations?"): adult, egg, juvenile, larva, nymph, pupa, subimago, teneral;
# - GBIF's LifeStage vocabulary (rs.gbif.org/vocabulary/gbif/life_stage), made for every
#   kingdom: zygote, embryo, larva, juvenile, adult, sporophyte, spore, gametophyte, gamete,
#   pupa. It lists "seedling", "chick", "pup", "fawn" as other names of its juvenile and
#   "tadpole", "caterpillar" of its larva, so the general stages serve birds, mammals,
#   amphibians and plants alike; the stages of ferns, mosses and fungi (sporophyte,
#   gametophyte, spore) come from it too.
LIFE_STAGES: tuple[str, ...] = (
    "adult",
    "juvenile",
    "egg",
    "embryo",
    "larva",
    "pupa",
    "nymph",
    "subimago",
    "teneral",
    "sporophyte",
    "gametophyte",
    "spore",
    "zygote",
    "gamete",
)

# iNaturalist's Sex annotation (female, male, cannot be determined) and, from GBIF's Sex
# vocabulary (rs.gbif.org/vocabulary/gbif/sex: male, female, hermaphrodite, undetermined),
# hermaphrodite; GBIF's "undetermined" is iNaturalist's "cannot be determined", kept as stored.
SEXES: tuple[str, ...] = ("female", "male", "hermaphrodite", "cannot be determined")

ATTRIBUTE_TERMS: tuple[AttributeTerm, ...] = (
    AttributeTerm("behavior", "Behavior", hint="foraging | courtship"),
    AttributeTerm(
        "lifeStage",
        "Life stage",
        LIFE_STAGES,
        "iNaturalist's Life Stage annotation and GBIF's LifeStage vocabulary",
    ),
    AttributeTerm("sex", "Sex", SEXES, "iNaturalist's Sex annotation and GBIF's Sex vocabulary"),
    AttributeTerm(
        "reproductiveCondition",
        "Reproductive condition",
        ("flowering", "fruiting", "budding", "no evidence of flowering"),
        "iNaturalist's Plant Phenology annotation",
    ),
    AttributeTerm(
        "vitality",
        "Vitality",
        ("alive", "dead", "cannot be determined"),
        "iNaturalist's Alive or Dead annotation",
    ),
    AttributeTerm("associatedTaxa", "Associated taxa", hint="visits flowers of: Salvia"),
    AttributeTerm("occurrenceRemarks", "Occurrence remarks"),
)
"""Every term, in the order exports write them."""

TERMS_BY_NAME: dict[str, AttributeTerm] = {t.term: t for t in ATTRIBUTE_TERMS}

DWC_ATTRIBUTE_TERMS: tuple[str, ...] = tuple(t.term for t in ATTRIBUTE_TERMS)

VOCABULARIES: dict[str, tuple[str, ...]] = {
    t.term: t.vocabulary for t in ATTRIBUTE_TERMS if t.vocabulary
}


def caption(term: str) -> str:
    """How the window and the command line name `term` ("Life stage (lifeStage)"); an unknown
    term as it is."""
    known = TERMS_BY_NAME.get(term)
    return known.caption if known is not None else term
