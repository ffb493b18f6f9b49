"""Several judges in the window: the status row says who is judging, blind mode hides another
judge's marks from the grid, Judge › Agreement… lists a disagreement and adjudicates it (the
metrics then count the adjudicated judgment and say so), Metrics from › Judge shows one judge's
own numbers, Double judging offers a sample blind, and Certify recall… shows the rule's phase
in a side panel, scoped to the filters shown (issues 28, 35)."""

from __future__ import annotations

import re

import pytest

from app.controllers.application import Application
from app.settings import Settings
from engine.judgments.queries import QueryStore
from tests.gui.test_judging import open_search
from tests.gui.test_window import index, wait_ready


@pytest.fixture
def judges_app(qtbot, make_app, photos, tmp_path) -> Application:
    settings = Settings(
        model="demo", library_dir=str(tmp_path / "library"), batch_size=16, judge_name="ann"
    )
    app = make_app(settings)
    wait_ready(qtbot, app)
    index(qtbot, app, photos)
    qtbot.waitUntil(lambda: app.session.ready, timeout=20_000)
    app.window.resize(1280, 800)
    open_search(qtbot, app, "red circle")
    return app


def top_ids(app: Application, n: int) -> list[int]:
    model = app.window.results_model
    return [model.item(row).image_id for row in range(n)]


def wait_written(qtbot, app: Application) -> None:
    qtbot.waitUntil(lambda: app.runner.idle(), timeout=20_000)


def test_two_judges_blind_mode_agreement_and_adjudication(qtbot, judges_app) -> None:
    app = judges_app
    judges = app.window.judges
    qtbot.waitUntil(lambda: judges.judge_label.text() == "Judge: ann", timeout=10_000)
    ids = top_ids(app, 4)
    query_id = app.judging.query_id
    assert query_id is not None
    for image_id, relevance in zip(ids[:3], [1, 1, 0], strict=True):
        app.judging.judge(image_id, relevance)
    wait_written(qtbot, app)
    # bob, at another workstation: disagrees on the first photo, judges the fourth.
    bob = QueryStore(app.session.library, user="bob")
    bob.judge(query_id, ids[0], 0)
    bob.judge(query_id, ids[1], 1)
    bob.judge(query_id, ids[3], 1)
    with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
        app.queries.reopen()
    model = app.window.results_model
    assert model.judgment(ids[3]) == 1 and model.judgment(ids[0]) == 0  # bob's are newest

    # Blind: only ann's own marks show, bob's badge is gone.
    with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
        judges.blind_action.setChecked(True)
    assert model.judgment(ids[3]) is None and model.judgment(ids[0]) == 1
    qtbot.waitUntil(lambda: "(blind)" in judges.judge_label.text(), timeout=10_000)
    with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
        judges.blind_action.setChecked(False)

    # Agreement: one disagreement (photo 1), settled from the dialog.
    dialog = app.agreement.open_dialog()
    assert dialog is not None
    qtbot.waitUntil(lambda: dialog.table.rowCount() == 1, timeout=20_000)
    assert "Cohen's kappa" in dialog.pairs.findChildren(type(dialog.title))[0].text()
    header = [dialog.table.horizontalHeaderItem(c).text() for c in range(3)]
    assert header == ["Photo", "ann", "bob"]
    assert [dialog.table.item(0, c).text() for c in (1, 2)] == ["relevant", "not relevant"]
    button = dialog.table.cellWidget(0, dialog.table.columnCount() - 2)
    assert button.text() == "Relevant"
    button.click()
    qtbot.waitUntil(lambda: dialog.table.item(0, 3).text() == "relevant", timeout=20_000)
    qtbot.waitUntil(lambda: model.judgment(ids[0]) == 1, timeout=20_000)
    summary = app.window.metrics_panel.summary
    qtbot.waitUntil(lambda: "newest per photo, 1 adjudicated" in summary.text(), timeout=20_000)
    dialog.close()

    # Metrics from › Judge bob: bob's own three judgments, said on the panel.
    bob_action = next(a for a in judges.views_menu.actions() if a.data() == "bob")
    bob_action.trigger()
    qtbot.waitUntil(lambda: "bob's judgments" in summary.text(), timeout=20_000)
    assert "R = 2 relevant  ·  3 judged" in summary.text()


def test_double_judging_and_certify_dialog(qtbot, judges_app, monkeypatch) -> None:
    app = judges_app
    ids = top_ids(app, 5)
    for image_id in ids:
        app.judging.judge(image_id, 1)
    wait_written(qtbot, app)
    query_id = app.judging.query_id
    # Offer all judged so far: blind goes on and the sample replaces the grid.
    with qtbot.waitSignal(app.feedback.judgingListShown, timeout=20_000) as shown:
        app.agreement.offer(None)
    assert shown.args[0].kind == "double-judging"
    model = app.window.results_model
    assert sorted(model.item(r).image_id for r in range(model.rowCount())) == sorted(ids)
    assert app.window.judges.blind_action.isChecked()
    # As another judge on this workstation, nothing of ann's shows.
    store = app.session.query_store()
    store.user = "bob"
    with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
        app.queries.reopen()
    assert all(model.judgment(i) is None for i in ids)
    store.user = "ann"

    panel = app.certify.open_panel()
    assert panel is not None
    qtbot.waitUntil(lambda: panel.phase.text().startswith("Step"), timeout=30_000)
    assert "judge the ranking's top" in panel.phase.text()
    assert panel.judge_button.isEnabled() and not panel.record_button.isEnabled()
    assert query_id == app.judging.query_id
    # What it costs is said before it starts, over every photo (no filter shown).
    assert re.search(r"over all 1\d\d photos: judge the ranking's top 40 first", panel.plan.text())
    assert "judgments in all" in panel.plan.text()


def test_certify_is_a_side_panel_scoped_to_the_filters_shown(qtbot, judges_app) -> None:
    """The panel docks beside the grid (never over it) and certifies what the chips show:
    with a licence filter, its population is the filtered photos, and the photos it asks for
    are among them."""
    from engine.search.filters import SearchFilters, filtered_ids

    app = judges_app
    window = app.window
    panel = app.certify.open_panel()
    assert panel is not None
    qtbot.waitUntil(lambda: panel.phase.text().startswith("Step"), timeout=30_000)
    dock = app.certify.dock
    assert dock is not None and not dock.isFloating() and dock.isVisible()
    grid = window.results.viewport()
    grid_rect = grid.rect().translated(grid.mapTo(window, grid.rect().topLeft()))
    dock_rect = dock.rect().translated(dock.mapTo(window, dock.rect().topLeft()))
    assert not grid_rect.intersects(dock_rect), (grid_rect, dock_rect)
    assert window.results.isVisible() and grid_rect.width() > 300

    app.filters.edit({"licenses": ["cc0"]})
    library = app.session.library
    scope = set(filtered_ids(library.catalog, SearchFilters(licenses=("cc0",))).tolist())
    assert 0 < len(scope) < 100
    wait_written(qtbot, app)  # the search again with the filter, and the check after it
    qtbot.waitUntil(
        lambda: "shown" in panel.plan.text() and panel.judge_button.isEnabled(), timeout=30_000
    )
    assert f"the {len(scope)} photos shown" in panel.plan.text()
    checked = app.certify.checked
    assert checked is not None and checked.scoped.state.population == len(scope)
    with qtbot.waitSignal(app.feedback.judgingListShown, timeout=20_000) as shown:
        panel.judge_button.click()
    listed = [item.image_id for item in shown.args[0].items]
    assert listed and set(listed) <= scope


def test_certify_opens_under_the_photo_pane_beside_a_small_window(qtbot, judges_app) -> None:
    """On a 1280 x 800 screen the photo pane shares its column with Where and when as tabs; the
    panel goes under that column, never in as a third tab hiding the photo."""
    app = judges_app
    window = app.window
    window.resize(1280, 760)
    qtbot.waitUntil(lambda: window.dock_layout.placement == "side", timeout=10_000)
    panel = app.certify.open_panel()
    assert panel is not None
    dock = app.certify.dock
    assert dock is not None and dock.isVisible() and not dock.isFloating()
    assert window.tabifiedDockWidgets(dock) == []
    detail = window.detail_dock
    assert detail.isVisible() and not detail.visibleRegion().isEmpty()
    assert dock.y() > detail.y()  # under the photo, in the same column
