"""User settings: one typed, versioned JSON file in the platformdirs config folder.

Only window geometry lives in QSettings; everything a user chooses lives here, so the command
line, the GUI and support requests see the same file. Older files are migrated step by step
(`_MIGRATIONS`); a file that cannot be read or holds bad values gives the defaults for those
values plus a readable list of problems (`LoadedSettings.problems`) for the window to show.
No Qt here.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app import paths
from engine.errors import BadInputError, QuadratError
from engine.files import atomic_write_text

if TYPE_CHECKING:
    from engine.catalog.library import RootMap
    from engine.methods.base import LanguageModelEndpoint

log = logging.getLogger(__name__)

SETTINGS_VERSION = 1
SETTINGS_FILE = "settings.json"
HISTORY_FILE = "query-history.json"
RECENT_FOLDERS_FILE = "recent-folders.json"
MAX_RECENT_FOLDERS = 64  # dialog kinds are few; a cap keeps a damaged file from growing
DEVICES = ("auto", "cpu", "cuda", "mps")
RUNTIMES = ("auto", "torch", "onnx")  # engine.models.onnx_runtime.RUNTIMES, without its import
DECODE_MODES = ("auto", "threads", "processes", "gpu")  # engine.indexing.decode_pool's, unimported
MAX_BATCH_SIZE = 1024
MAX_HISTORY = 50
MAX_JUDGE_NAME = 128  # the catalog's judged_by column
MIN_INDEX_MEMORY_GB = 0.25
MAX_INDEX_MEMORY_GB = 4096.0
# The models offered in the window come from engine.models.offers.model_offers() (the model chooser
# and the settings dialog share them); any other valid spec may be typed in.
DEFAULT_MODEL = "ViT-B-32:laion2b_s34b_b79k"


class SettingsError(BadInputError):
    """A settings value is invalid; the message says which and why."""


@dataclass(frozen=True)
class Settings:
    """Every user setting, with its default."""

    model: str = DEFAULT_MODEL  # docs/SPEC.md §5.2 model spec
    device: str = "auto"
    # How a model encodes on the CPU: auto (ONNX when the model exports, else torch), torch, onnx.
    runtime: str = "auto"
    batch_size: int = 32
    library_dir: str = ""  # empty: the default library folder
    top_k: int = 1000  # results per search
    metrics_k: int = 10  # the metrics panel's cut-off rank, kept across sessions
    thumbnail_size: int = 160  # the results grid's thumbnails, pixels (64 to 320), kept too
    # Empty: a SQLite file inside the library folder. Otherwise any SQLAlchemy URL.
    database_url: str = ""
    # The text-to-image generator of visret: empty for none configured (the demo painter then
    # draws on a demo library), else a spec as `quadrat search --generator` takes it.
    generator: str = ""
    # An OpenAI-compatible chat endpoint (e.g. http://localhost:11434/v1 for Ollama) and model
    # for methods that ask a language model; empty: none. The API key is read from the
    # environment (QUADRAT_LLM_API_KEY), never written to this file.
    llm_url: str = ""
    llm_model: str = ""
    # Memory the vector index may take, in GB: above it (or above 2 million photos) the index
    # is compressed (IVF-PQ, re-ranked from a float16 file on disk). 4 GB suits a 32 GB machine.
    index_memory_gb: float = 4.0
    # This workstation's folders for collection roots a shared catalog records elsewhere:
    # "CATALOG_ROOT=FOLDER_HERE" pairs, one per line (Z:\\photos=/mnt/photos). Kept here, not in
    # the catalog, so each workstation has its own; QUADRAT_MAP_ROOT adds to it.
    root_map: str = ""
    # How indexing decodes photos: in threads, in worker processes, auto (processes on 4 or more
    # cores; threads below, which start at once), or gpu (JPEGs decoded on a CUDA encoder's GPU,
    # else as auto).
    decode: str = "auto"
    # Who is judging, as judgments and attributes record it; empty: the PostgreSQL login on a
    # server catalog, else the OS user.
    judge_name: str = ""
    # The results grid shows one card per event (a camera's burst) rather than per photo.
    group_by_event: bool = False
    # The detector's boxes drawn on the tiles and the full view (View › Show boxes), from this
    # confidence up (0..1; MegaDetector's advice for a first look is 0.2).
    show_boxes: bool = True
    box_threshold: float = 0.2
    version: int = SETTINGS_VERSION

    def library_path(self) -> Path:
        """The library folder to open."""
        return (
            Path(self.library_dir).expanduser() if self.library_dir else paths.default_library_dir()
        )

    def validate(self) -> Settings:
        """Return self, or raise `SettingsError` naming the first bad value."""
        for problem in self.problems():
            raise SettingsError(problem)
        return self

    def problems(self) -> list[str]:
        """Readable descriptions of every invalid value (empty when all are fine)."""
        out: list[str] = []
        try:
            validate_model_spec(self.model)
        except BadInputError as exc:
            out.append(f"Model: {exc}")
        if self.device not in DEVICES:
            out.append(f"Device: '{self.device}' is not one of {', '.join(DEVICES)}")
        if self.runtime not in RUNTIMES:
            out.append(f"Runtime: '{self.runtime}' is not one of {', '.join(RUNTIMES)}")
        if self.decode not in DECODE_MODES:
            out.append(f"Decoding: '{self.decode}' is not one of {', '.join(DECODE_MODES)}")
        if not isinstance(self.batch_size, int) or not 1 <= self.batch_size <= MAX_BATCH_SIZE:
            out.append(f"Batch size: must be a whole number from 1 to {MAX_BATCH_SIZE}")
        if not isinstance(self.top_k, int) or not 1 <= self.top_k <= 100_000:
            out.append("Results per search: must be a whole number from 1 to 100000")
        if not isinstance(self.metrics_k, int) or not 1 <= self.metrics_k <= 1000:
            out.append("Metrics k: must be a whole number from 1 to 1000")
        if not isinstance(self.thumbnail_size, int) or not 64 <= self.thumbnail_size <= 320:
            out.append("Thumbnail size: must be a whole number of pixels from 64 to 320")
        if not isinstance(self.box_threshold, float) or not 0.0 <= self.box_threshold <= 1.0:
            out.append("Box threshold: must be a confidence from 0 to 1")
        if (
            not isinstance(self.index_memory_gb, float)
            or not MIN_INDEX_MEMORY_GB <= self.index_memory_gb <= MAX_INDEX_MEMORY_GB
        ):
            out.append(
                f"Index memory: must be a number of GB from {MIN_INDEX_MEMORY_GB:g} to "
                f"{MAX_INDEX_MEMORY_GB:g}"
            )
        if len(self.judge_name) > MAX_JUDGE_NAME or self.judge_name != self.judge_name.strip():
            out.append(
                f"Judge: a name of at most {MAX_JUDGE_NAME} characters, without spaces around it"
            )
        if self.database_url and "://" not in self.database_url:
            out.append(
                f"Database URL: '{self.database_url}' is not a URL "
                "(e.g. sqlite:////path/catalog.sqlite3); leave it empty for the default"
            )
        try:
            root_map_of(self.root_map)
        except BadInputError as exc:
            out.append(f"Root mapping: {exc}")
        if self.library_dir:
            folder = Path(self.library_dir).expanduser()
            if folder.exists() and not folder.is_dir():
                out.append(f"Library folder: {folder} exists and is not a folder")
            elif not folder.is_absolute():
                out.append(f"Library folder: give a full path, not '{self.library_dir}'")
        return out


ROOT_MAP_ENV = "QUADRAT_MAP_ROOT"
"""Root mappings for this process, added to the settings' (";" or newlines between pairs)."""


def root_map_of(*texts: str) -> RootMap:
    """The `RootMap` of "OLD=NEW" pairs written one per line or separated by ";"; earlier
    texts win for the same catalog root. Raises `BadInputError` for a malformed pair."""
    from engine.catalog.library import RootMap

    items = [
        item.strip()
        for text in texts
        for line in text.splitlines()
        for item in line.split(";")
        if item.strip()
    ]
    return RootMap.parse(items)


def index_memory_bytes(gigabytes: float) -> int:
    """The vector index's memory budget in bytes for a setting of `gigabytes` (GiB)."""
    return int(gigabytes * 1024**3)


def validate_model_spec(spec: str) -> str:
    """Check a model spec's form (and that a checkpoint file exists) without loading torch."""
    from engine.models.encoders import parse_model_spec

    parsed = parse_model_spec(spec)
    if (
        parsed.kind in ("checkpoint", "local-dir")
        and parsed.path is not None
        and not parsed.path.exists()
    ):
        raise BadInputError(f"the model file {parsed.path} does not exist")
    return parsed.spec


@dataclass(frozen=True)
class LoadedSettings:
    settings: Settings
    problems: list[str] = field(default_factory=list)


def settings_path() -> Path:
    return paths.config_dir() / SETTINGS_FILE


# Each step turns a version-n dict into a version-(n+1) dict.
_MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}


def _migrate(data: dict[str, Any]) -> dict[str, Any]:
    version = data.get("version", 1)
    if not isinstance(version, int) or version < 1:
        raise SettingsError(f"unknown settings version {version!r}")
    if version > SETTINGS_VERSION:
        raise SettingsError(
            f"the settings file was written by a newer Quadrat (version {version}); "
            "using the defaults for this session"
        )
    while version < SETTINGS_VERSION:
        data = _MIGRATIONS[version](data)
        version += 1
        data["version"] = version
    return data


def load_settings(path: Path | None = None) -> LoadedSettings:
    """Read the settings file; missing -> defaults; bad values -> defaults plus problems."""
    path = path or settings_path()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return LoadedSettings(Settings())
    except (OSError, ValueError) as exc:
        log.warning("cannot read settings %s: %s", path, exc)
        return LoadedSettings(Settings(), [f"Cannot read {path}: {exc}. Using the defaults."])
    if not isinstance(raw, dict):
        return LoadedSettings(Settings(), [f"{path} does not hold settings. Using the defaults."])
    try:
        raw = _migrate(raw)
    except SettingsError as exc:
        return LoadedSettings(Settings(), [str(exc)])

    defaults = Settings()
    known = {f.name: f for f in fields(Settings)}
    values: dict[str, Any] = {}
    problems: list[str] = []
    for name, value in raw.items():
        if name not in known:
            log.info("ignoring unknown setting %r", name)
            continue
        expected = type(getattr(defaults, name))
        if expected is float and type(value) is int:
            value = float(value)  # "index_memory_gb": 8 means 8.0
        if type(value) is not expected:  # bool is not an int here
            problems.append(
                f"{name}: expected {expected.__name__}, found {value!r}; using the default"
            )
            continue
        values[name] = value
    settings = replace(defaults, **values)
    # Each bad value falls back to its default, keeping the good ones.
    for problem in settings.problems():
        problems.append(problem + "; using the default")
    if problems:
        fixed = {}
        for name in values:
            trial = replace(defaults, **{name: values[name]})
            if not trial.problems():
                fixed[name] = values[name]
        settings = replace(defaults, **fixed)
    return LoadedSettings(settings, problems)


def save_settings(settings: Settings, path: Path | None = None) -> Path:
    """Validate and write atomically. Raises `SettingsError` for a bad value."""
    settings.validate()
    path = path or settings_path()
    _write_json(path, asdict(replace(settings, version=SETTINGS_VERSION)))
    return path


def _write_json(path: Path, data: Any) -> None:
    try:
        atomic_write_text(path, json.dumps(data, indent=2) + "\n")
    except OSError as exc:
        raise QuadratError(f"cannot save {path}: {exc.strerror or exc}") from exc


class QueryHistory:
    """Recent query texts, newest last, deduplicated, kept in the data folder."""

    def __init__(self, path: Path | None = None, limit: int = MAX_HISTORY) -> None:
        self.path = path or paths.data_dir() / HISTORY_FILE
        self.limit = limit
        self.items: list[str] = []
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            if isinstance(raw, list):
                self.items = [q for q in raw if isinstance(q, str) and q.strip()][-limit:]
        except (OSError, ValueError):
            pass

    def add(self, query: str) -> None:
        query = " ".join(query.split())
        if not query:
            return
        if query in self.items:
            self.items.remove(query)
        self.items.append(query)
        del self.items[: -self.limit]
        try:
            _write_json(self.path, self.items)
        except QuadratError as exc:
            log.warning("%s", exc)


class RecentFolders:
    """The folder each kind of file dialog was last used in (kind -> folder), kept beside the
    settings so the next session's dialogs open there too. Read again before each write, so
    the window and the benchmark view, each with its own instance, keep each other's folders."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or paths.config_dir() / RECENT_FOLDERS_FILE
        self.folders = self._read()

    def _read(self) -> dict[str, str]:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}  # none yet, or unreadable: dialogs start where Qt starts them
        if not isinstance(raw, dict):
            return {}
        return {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, str) and v}

    def folder(self, kind: str) -> str:
        """The folder last chosen in dialogs of `kind`, or ""."""
        return self.folders.get(kind, "")

    def remember(self, kind: str, folder: str) -> None:
        """Keep `folder` for dialogs of `kind`; a failed write is a warning, nothing more."""
        folders = self._read()
        folders.pop(kind, None)
        folders[kind] = folder  # newest last: the oldest go first past the cap
        self.folders = dict(list(folders.items())[-MAX_RECENT_FOLDERS:])
        try:
            _write_json(self.path, self.folders)
        except QuadratError as exc:
            log.warning("%s", exc)


LLM_API_KEY_ENV = "QUADRAT_LLM_API_KEY"


def language_model(settings: Settings) -> LanguageModelEndpoint:
    """The configured language-model endpoint, its API key from the environment."""
    import os

    from engine.methods.base import LanguageModelEndpoint

    return LanguageModelEndpoint(
        settings.llm_url.strip(), settings.llm_model.strip(), os.environ.get(LLM_API_KEY_ENV, "")
    )
