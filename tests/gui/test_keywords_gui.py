"""The keyword filter in the window: Add filter ▾ › Keyword… keeps the photos whose sidecar or
embedded XMP/IPTC holds the keyword, shown as a chip."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.gui.test_filters_gui import _rerun, _shown, _summarised
from tests.gui.test_window import indexed_app, search
from widgets.filter_bar import KeywordEditor


def test_a_keyword_chip_keeps_the_photos_with_that_keyword(qtbot, make_app, photos: Path) -> None:
    exiftool = shutil.which("exiftool")
    if exiftool is None:
        if os.environ.get("CI"):
            pytest.fail("exiftool is missing (CI installs libimage-exiftool-perl)")
        pytest.skip("exiftool is not installed")
    tagged = sorted(photos.rglob("*.jpg"))[7]
    subprocess.run(
        [exiftool, "-q", "-overwrite_original", "-XMP-lr:HierarchicalSubject=Animals|Cats|tabby",
         str(tagged)],
        check=True,
    )  # fmt: skip
    app = indexed_app(qtbot, make_app, photos)
    search(qtbot, app, "red circle")
    _summarised(qtbot, app)
    bar = app.window.filter_bar
    bar.menu.aboutToShow.emit()  # the menu is built as it opens
    keyword_action = next(a for a in bar.menu.actions() if a.text() == "Keyword…")
    keyword_action.trigger()
    editor = bar.editor
    assert isinstance(editor, KeywordEditor)
    editor.edit.setText("Cats|tabby")
    _rerun(qtbot, app, editor.accept)
    assert bar.chip_labels() == ["keyword “Cats|tabby”"]
    shown = _shown(app)
    assert len(shown) == 1
    assert Path(shown[0].path).name == tagged.name
