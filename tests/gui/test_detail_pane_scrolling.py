"""The photo pane keeps QWidget's own scroll(dx, dy): its scroll area lives beside it."""

from __future__ import annotations

from PySide6.QtWidgets import QScrollArea

from widgets.detail_pane import DetailPane


def test_the_pane_scrolls_its_children_as_any_widget_does(qtbot) -> None:
    pane = DetailPane()
    qtbot.addWidget(pane)
    pane.resize(420, 300)
    pane.show()
    area = pane.findChild(QScrollArea)
    assert area is not None
    before = area.pos()
    # QWidget.scroll moves the pane's children; an attribute of the same name used to hide it.
    pane.scroll(0, 7)
    assert area.pos().y() == before.y() + 7
