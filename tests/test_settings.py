"""The settings file shared by the window and the command line."""

from __future__ import annotations

import json

from app.settings import Settings, load_settings, save_settings, settings_path


def test_a_database_url_must_be_a_url_and_falls_back_to_the_default():
    assert Settings(database_url="sqlite:////tmp/x.db").problems() == []
    problems = Settings(database_url="catalog.db").problems()
    assert len(problems) == 1 and "Database URL" in problems[0]


def test_older_files_without_the_database_url_still_load(tmp_path):
    save_settings(Settings(batch_size=8))
    raw = json.loads(settings_path().read_text())
    raw.pop("database_url")
    settings_path().write_text(json.dumps(raw))
    loaded = load_settings()
    assert loaded.problems == []
    assert loaded.settings.batch_size == 8 and loaded.settings.database_url == ""
