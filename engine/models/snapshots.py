"""Multi-file repositories into the model store: image generators and VLMs.

A diffusers or transformers model is a folder of configs, tokenizer files and weights; it comes
through huggingface_hub's own snapshot machinery (`snapshot_download` with `local_dir` and the
offer's file patterns) rather than a second downloader: it lists the repository, fetches the
files in parallel, resumes a `.incomplete` file with an HTTP Range and records each file's
commit and ETag. Around it we add what the store needs:

- byte progress to our callback and a cancel between chunks (a progress-bar class handed to
  huggingface_hub, which raises `Cancelled` from its `update`);
- the download lands in `STORE/.partial/<slug>` and is renamed into place whole, with a manifest
  (role, source, commit, files with their sha256); a cancel keeps every finished file, and the
  next call fetches only the rest (huggingface_hub 2.x restarts a file it had not finished,
  so a resume is per file: sharded weights resume shard by shard);
- each LFS file is checked against the sha256 the hub gave for it (huggingface_hub reads it
  from `X-Linked-Etag` on the hub's own answer, never a CDN's ETag);
- the repository is listed first (huggingface_hub's file metadata at one commit, which the
  download then fetches): the bytes of the files the offer's patterns take are recorded in the
  store (`recorded_sizes`), so the catalogue's estimate of its size is never shown again.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engine.errors import Cancelled, ModelLoadError, one_line
from engine.files import file_sha256
from engine.models.folders import (
    MANIFEST_NAME,
    PARTIAL_DIR,
    InstalledModel,
    StoreFolders,
    installed_from,
)
from engine.models.hub import ensure_reachable, sha256_of_etag, unavailable
from engine.models.offers import ModelOffer
from engine.progress import CancelToken, ProgressCallback, RateMeter

_HF_META = Path(".cache") / "huggingface"
WORKERS = 4  # files fetched at once
SIZES_NAME = ".hub-sizes.json"  # in the store: what the hub reported each offer's files weigh


class _ByteCounter:
    """What huggingface_hub's byte bars report, across its threads. It keeps two byte bars that
    both see every HTTP chunk (bytes received, bytes written), so the larger of them is the
    count, never their sum."""

    def __init__(self, key: str, progress: ProgressCallback, cancel: CancelToken | None) -> None:
        self.key = key
        self.progress = progress
        self.cancel = cancel
        self.lock = threading.Lock()
        self.bars: list[Any] = []
        self.meter = RateMeter(0)

    def bar_class(self) -> type[Any]:
        """A tqdm-like class bound to this counter (huggingface_hub instantiates it itself)."""
        counter = self

        class _Bar:
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                self.n = int(kwargs.get("initial") or 0)
                self.total = int(kwargs.get("total") or 0)
                if kwargs.get("unit") == "B":  # the "files" bar of the thread map is not bytes
                    with counter.lock:
                        counter.bars.append(self)

            def update(self, n: float | None = 1) -> None:
                counter.check()
                self.n += int(n or 0)
                if self in counter.bars:
                    counter.report()

            def __enter__(self) -> _Bar:
                return self

            def __exit__(self, *exc: object) -> None:
                pass

            def __getattr__(self, name: str) -> Any:
                return lambda *args, **kwargs: None  # refresh, close, set_description...

        return _Bar

    def report(self) -> None:
        with self.lock:
            done = max((int(bar.n) for bar in self.bars), default=0)
            self.meter.total = max((int(bar.total or 0) for bar in self.bars), default=0)
            report = self.meter.update(done, self.key)
        self.progress(report)

    def check(self) -> None:
        if self.cancel is not None and self.cancel.cancelled:
            raise Cancelled()


def fetch_repository(
    store: StoreFolders,
    offer: ModelOffer,
    target: Path,
    endpoint: str,
    token: str | None,
    progress: ProgressCallback,
    cancel: CancelToken | None,
) -> InstalledModel:
    """Download the catalogue's generator or VLM `offer` into `target` in the store (resuming a partial
    download), check it, and rename it into place. Cancel raises `Cancelled` and keeps what
    came; no network is a one-line `ModelUnavailableError` within seconds."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    key = offer.spec
    ensure_reachable(key, endpoint)
    partial = store.root / PARTIAL_DIR / target.name
    partial.mkdir(parents=True, exist_ok=True)
    counter = _ByteCounter(key, progress, cancel)
    try:
        commit, total = _listed_size(offer, endpoint, token)
        _record_size(store.root, offer.spec, total, commit)
        snapshot_download(
            offer.source,
            revision=commit,  # the commit whose files were just weighed
            local_dir=partial,
            allow_patterns=list(offer.files) or None,
            ignore_patterns=list(offer.skip) or None,
            endpoint=endpoint,
            token=token or False,  # never a saved login we were not given (see hub_token)
            tqdm_class=counter.bar_class(),
            max_workers=WORKERS,
        )
    except Cancelled:
        raise
    except GatedRepoError:
        raise unavailable(
            key, f"{offer.source} is gated: accept its licence on the hub and set HF_TOKEN"
        ) from None
    except (RepositoryNotFoundError, EntryNotFoundError):
        raise unavailable(key, f"the hub has no {offer.source}") from None
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError) as error:
        raise unavailable(key, one_line(error)) from None
    counter.check()
    files = _checked_files(partial, key)
    if not files:
        raise unavailable(key, f"{offer.source} has none of the files a {offer.role} needs")
    return _install(store, offer, partial, target, files)


def _listed_size(offer: ModelOffer, endpoint: str, token: str | None) -> tuple[str, int]:
    """The repository's current commit, and the bytes of the files the offer's patterns take
    from it, as the hub's file listing gives them (huggingface_hub's metadata, the same listing
    `snapshot_download` reads)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError
    from huggingface_hub.hf_api import RepoFile

    api = HfApi(endpoint=endpoint, token=token or False)
    try:
        commit = str(api.repo_info(offer.source, revision="main").sha or "")
        if not commit:
            raise unavailable(offer.spec, f"the hub named no commit of {offer.source}")
        listed = [
            entry
            for entry in api.list_repo_tree(offer.source, recursive=True, revision=commit)
            if isinstance(entry, RepoFile)
        ]
    except HfHubHTTPError:
        raise  # gated, missing: said by the caller, as for the download itself
    except Exception as error:  # the HTTP client's own: a dropped connection, a timeout
        if isinstance(error, ModelLoadError):
            raise
        raise unavailable(offer.spec, one_line(error)) from None
    return commit, sum(int(entry.size or 0) for entry in listed if offer.takes(entry.path))


def recorded_sizes(root: Path) -> dict[str, int]:
    """The download size the hub reported for each catalogue generator or VLM a download of it
    has listed in the model store at `root` (by spec; empty when none): what the chooser and
    `quadrat models list` show in place of the catalogue's estimate."""
    try:
        data = json.loads((Path(root) / SIZES_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        str(spec): int(entry["bytes"])
        for spec, entry in data.items()
        if isinstance(entry, dict)
        and isinstance(entry.get("bytes"), int)
        and not isinstance(entry.get("bytes"), bool)
        and entry["bytes"] > 0
    }


def _record_size(root: Path, spec: str, total: int, commit: str) -> None:
    """Remember what the hub reported `spec`'s files weigh (best effort: a store on a read-only
    disk keeps showing the estimate)."""
    if total <= 0:
        return
    path = Path(root) / SIZES_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    data[spec] = {
        "bytes": total,
        "commit": commit,
        "checked": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    temp: Path | None = None
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=root, prefix=f"{SIZES_NAME}.", suffix=".tmp")
        temp = Path(name)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2)
        os.replace(temp, path)  # whole or not at all: a reader never sees half a file
    except OSError:
        if temp is not None:
            temp.unlink(missing_ok=True)


def _checked_files(folder: Path, key: str) -> dict[str, dict[str, Any]]:
    """Every downloaded file with its size and sha256, each LFS file checked against the
    sha256 the hub gave for it; a damaged file is deleted (the next run fetches it again)."""
    files: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if not path.is_file() or relative.parts[0] == ".cache":
            continue
        name = relative.as_posix()
        digest = file_sha256(path)
        expected = _recorded_sha256(folder, name)
        if expected is not None and digest != expected:
            path.unlink(missing_ok=True)
            (folder / _HF_META / "download" / f"{name}.metadata").unlink(missing_ok=True)
            raise ModelLoadError(
                f"the download of {key} was damaged ({name}: its sha256 does not match); "
                f"run it again"
            )
        files[name] = {"size_bytes": path.stat().st_size, "sha256": digest}
    return files


def _recorded_sha256(folder: Path, name: str) -> str | None:
    """The sha256 huggingface_hub recorded for a file (its ETag, from the hub's X-Linked-Etag
    for LFS files), or None for a small file whose ETag is a git blob id."""
    metadata = folder / _HF_META / "download" / f"{name}.metadata"
    try:
        lines = metadata.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    return sha256_of_etag(lines[1]) if len(lines) > 1 else None


def _install(
    store: StoreFolders,
    offer: ModelOffer,
    partial: Path,
    target: Path,
    files: dict[str, dict[str, Any]],
) -> InstalledModel:
    """Write the manifest and rename the finished download into the store."""
    commit = ""
    for metadata in (partial / _HF_META / "download").rglob("*.metadata"):
        commit = metadata.read_text(encoding="utf-8").split("\n", 1)[0].strip()
        break
    manifest = {
        "spec": offer.spec,
        "role": offer.role,
        "model_key": f"{offer.role}:hf-hub:{offer.source}@{commit}" if commit else "",
        "size_bytes": sum(int(entry["size_bytes"]) for entry in files.values()),
        "files": files,
        "commit": commit,
        "licence": offer.licence,
        "source": offer.source,
        "origin": "download",
        "installed": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    shutil.rmtree(partial / ".cache", ignore_errors=True)
    (partial / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    store.root.mkdir(parents=True, exist_ok=True)
    folder = store._place(partial, target)
    return installed_from(folder, manifest)
