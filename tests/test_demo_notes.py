"""The demo's observer notes: a fixed share of the records, true to what each photo shows, and
added without moving any photo, field or judgment."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

import engine.demo.collection as demo
from engine.demo.collection import NOTES_SHARE, write_demo_collection


def _metadata(root: Path) -> dict:
    return json.loads((root / "metadata.json").read_text(encoding="utf-8"))


def _digests(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "metadata.json"
    }


def test_notes_change_nothing_else(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    with_notes = write_demo_collection(tmp_path / "notes", images_per_class=3)
    monkeypatch.setattr(demo, "NOTES_SHARE", 0.0)
    without = write_demo_collection(tmp_path / "plain", images_per_class=3)
    assert _digests(with_notes.root) == _digests(without.root)  # photos, queries, judgments
    a, b = _metadata(with_notes.root), _metadata(without.root)
    assert [{k: v for k, v in r.items() if k != "notes"} for r in a["images"]] == b["images"]
    assert a["annotations"] == b["annotations"] and a["categories"] == b["categories"]
    assert not any("notes" in r for r in b["images"])


def test_a_fixed_share_of_photos_has_notes_true_to_the_scene(demo_collection):
    metadata = _metadata(demo_collection.root)
    images = metadata["images"]
    noted = [r for r in images if "notes" in r]
    assert len(noted) == round(NOTES_SHARE * len(images))
    names = {c["id"]: c["common_name"] for c in metadata["categories"]}
    objects: dict[int, list[dict]] = {r["id"]: [] for r in images}
    for a in metadata["annotations"]:
        objects[a["image_id"]].append({**a["attributes"], "name": names[a["category_id"]]})
    texts = [r["notes"] for r in noted]
    assert len(set(texts)) > 40  # varied, as people write
    assert any(len(t.split()) <= 2 for t in texts)  # some are terse
    for record in noted:
        note = record["notes"].lower()
        drawn = objects[record["id"]]
        words = set(re.findall(r"[a-z]+", note))
        if words & {"hidden", "obscured", "covered"}:
            assert any(o["occluded"] for o in drawn), note
        if words & {"tiny", "small"}:
            assert any(o["size"] == "tiny" for o in drawn), note
        if words & {"big", "large", "huge"}:
            assert any(o["size"] == "large" for o in drawn), note
        if words & {"stripes", "striped", "stripy"}:
            assert record["attributes"]["background"] == "striped", note
        if words & {"two", "pair"} or re.search(r"\b2\b", note):
            assert record["attributes"]["count"] == 2, note
        if words & {"three"} or re.search(r"\b3\b", note):
            assert record["attributes"]["count"] == 3, note
        for other in {o["name"] for o in drawn[1:]} | set(names.values()):
            if other in note:  # the other object named is one that is in the photo
                assert other in {o["name"] for o in drawn[1:]}, note
    # Every kind of fact appears somewhere.
    joined = " ".join(texts).lower()
    for word in ("hidden", "tiny", "big", "striped", "two", "three", "next to"):
        assert word in joined, word
