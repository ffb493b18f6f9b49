"""The licence table: every spelling a record may use resolves to one licence, with its URI."""

from __future__ import annotations

import pytest

from engine.licences import GBIF_DATASET_CODES, element_title, read_licence

# iNaturalist's COCO-format metadata (iNat 2021) lists its licences by name with a URL; the
# importer keeps the URL, and a catalog made before it kept the name: both must resolve alike.
INAT_LICENCES = [
    ("Attribution-NonCommercial-ShareAlike License", "http://creativecommons.org/licenses/by-nc-sa/4.0/", "CC-BY-NC-SA-4.0"),
    ("Attribution-NonCommercial License", "http://creativecommons.org/licenses/by-nc/4.0/", "CC-BY-NC-4.0"),
    ("Attribution-NonCommercial-NoDerivs License", "http://creativecommons.org/licenses/by-nc-nd/4.0/", "CC-BY-NC-ND-4.0"),
    ("Attribution License", "http://creativecommons.org/licenses/by/4.0/", "CC-BY-4.0"),
    ("Attribution-ShareAlike License", "http://creativecommons.org/licenses/by-sa/4.0/", "CC-BY-SA-4.0"),
    ("Attribution-NoDerivs License", "http://creativecommons.org/licenses/by-nd/4.0/", "CC-BY-ND-4.0"),
    ("Public Domain Dedication", "http://creativecommons.org/publicdomain/zero/1.0/", "CC0-1.0"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "url", "code"), INAT_LICENCES)
def test_inaturalist_names_and_urls_resolve_to_the_same_licence(name, url, code):
    by_name, by_url = read_licence(name), read_licence(url)
    assert by_name.code == by_url.code == code
    assert by_name.url == by_url.url and by_url.url.startswith("http://creativecommons.org/")
    assert by_name.reusable and by_url.reusable
    assert by_name.version_assumed == code.startswith("CC-BY") and not by_url.version_assumed


def test_cc0_and_the_public_domain_mark_are_different_instruments():
    cc0 = read_licence("Public Domain Dedication")
    mark = read_licence("Public Domain Mark")
    assert cc0.url == "http://creativecommons.org/publicdomain/zero/1.0/legalcode"
    assert mark.url == "http://creativecommons.org/publicdomain/mark/1.0/"
    assert cc0.gbif_dataset_licence and not mark.gbif_dataset_licence
    assert cc0.public_domain and mark.public_domain


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("CC-BY-NC-4.0", "CC-BY-NC-4.0"),
        ("cc-by-nc", "CC-BY-NC-4.0"),
        ("CC BY-SA 3.0", "CC-BY-SA-3.0"),
        ("cc_by", "CC-BY-4.0"),
        ("CC0", "CC0-1.0"),
        ("CC0-1.0", "CC0-1.0"),
        ("Creative Commons Attribution 4.0 International License", "CC-BY-4.0"),
        ("https://creativecommons.org/licenses/by/2.0/de/deed.en", "CC-BY-2.0"),
        ("All rights reserved", "ARR"),
        ("©", "ARR"),
    ],
)
def test_codes_spdx_and_words(text, code):
    assert read_licence(text).code == code


@pytest.mark.parametrize(
    "text", ["", None, "No known copyright restrictions", "cc-by-nd-sa", "licenses/by-xx/4.0"]
)
def test_what_is_not_a_known_licence_allows_no_reuse(text):
    licence = read_licence(text)
    assert not licence.recognised and not licence.reusable and licence.url == ""


def test_all_rights_reserved_is_known_but_not_reusable():
    licence = read_licence("(c) Jane Doe, all rights reserved")
    assert licence.code == "ARR" and not licence.reusable


def test_gbif_accepts_three_dataset_licences():
    accepted = {read_licence(t).code for t in ("CC0", "CC BY 4.0", "CC BY-NC 4.0")}
    assert accepted == GBIF_DATASET_CODES
    assert not read_licence("CC BY-SA 4.0").gbif_dataset_licence
    assert not read_licence("CC BY 3.0").gbif_dataset_licence


def test_long_titles_for_the_dataset_metadata():
    assert element_title(read_licence("cc-by-nc")) == (
        "Creative Commons Attribution-NonCommercial 4.0"
    )
