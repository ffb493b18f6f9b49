"""Where Quadrat keeps its files (platformdirs locations), overridable for tests and kiosks.

`QUADRAT_HOME`, when set, puts config, data, cache and logs under one folder.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "Quadrat"


def _base(kind: str) -> Path:
    home = os.environ.get("QUADRAT_HOME")
    if home:
        return Path(home).expanduser() / kind
    getter = {
        "config": platformdirs.user_config_dir,
        "data": platformdirs.user_data_dir,
        "cache": platformdirs.user_cache_dir,
        "logs": platformdirs.user_log_dir,
    }[kind]
    return Path(getter(APP_NAME, appauthor=False))


def config_dir() -> Path:
    return _base("config")


def data_dir() -> Path:
    return _base("data")


def cache_dir() -> Path:
    return _base("cache")


def log_dir() -> Path:
    return _base("logs")


def default_library_dir() -> Path:
    return data_dir() / "library"


def demo_collection_dir() -> Path:
    return data_dir() / "demo-collection"


def demo_library_dir() -> Path:
    return data_dir() / "demo-library"


def model_cache_dir() -> Path:
    """open_clip's download cache (models fetched on first use, before the model store)."""
    return cache_dir() / "models"


def models_dir() -> Path:
    """The model store: one folder per installed model (downloads, offline packs)."""
    return data_dir() / "models"
