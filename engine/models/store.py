"""Models on disk: the catalogue of offered models, the model store, downloads and offline packs.

The store is a folder with one folder per installed model::

    STORE/<slug>/open_clip_config.json        the open_clip config (model_cfg, preprocess_cfg)
    STORE/<slug>/open_clip_model.safetensors  the weights (safetensors: loading runs no code)
    STORE/<slug>/manifest.json                spec, sha256, size, licence, source, origin
    STORE/.partial/<slug>/<file>.part         a download in progress, resumed by HTTP Range

A model installed here loads without a network under the same model key as a direct open_clip
load (`engine.models.encoders.load_encoder(..., store_dir=STORE)`), so a library indexed either way
matches. An offline pack is one zip archive (stored, not compressed: weights do not compress)
holding the config, the weights and a manifest with their sha256, size, licence and source.
Importing streams each entry into a temporary folder, stopping at the size the manifest gives
and hashing as it goes, and renames the folder into place, so a bad pack leaves nothing behind.

A pack only vouches for itself: its checksums prove it was not damaged on the way, not that it
holds the model it names. So a pack's weights must fit the architecture its name implies (for
ARCH:TAG, open_clip's own config of ARCH; for hf-hub:ORG/NAME, the pack's config), and a model
installed from a pack gets its own identity, ``SPEC [pack sha256-XXXXXXXXXXXXXXXX]``, unless
this store already holds the same weights downloaded from the source: vectors made with a pack's
weights are never taken for the published model's. A pack never silently replaces an installed
model whose weights differ.

Temporary folders (``.incoming-*``) hold an owner lock while in use; ones whose owner died (a
killed import) are removed the next time the store is listed or installs something.

Downloads are a small urllib client (byte progress, cancel between chunks, `Range` resume of the
partial file, the hub's sha256 ETag checked when given); it is used rather than
huggingface_hub's because it reports progress to our callback, stops on our `CancelToken` and
keeps the partial file where we can show and resume it. A probe of a few seconds (no probe at
all under HF_HUB_OFFLINE) makes "no network" a one-line `ModelUnavailableError` at once instead
of a minute of retries.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import stat
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from engine.errors import BadInputError, Cancelled, ModelLoadError, one_line
from engine.files import file_sha256
from engine.models.spec import DEMO_SPEC, ModelSpec, as_model_spec, demo_weights_path
from engine.models.spec import store_key as store_key  # re-exported: it was defined here
from engine.progress import CancelToken, ProgressCallback, RateMeter, no_progress

log = logging.getLogger(__name__)

CONFIG_NAME = "open_clip_config.json"
WEIGHTS_NAME = "open_clip_model.safetensors"
MANIFEST_NAME = "manifest.json"
PACK_FORMAT = "quadrat-model-pack"
PACK_VERSION = 1
PACK_SUFFIX = ".qmodel"
DEFAULT_ENDPOINT = "https://huggingface.co"
PROBE_SECONDS = 3.0
_PARTIAL = ".partial"
_HUB_WEIGHTS = ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")
_MB = 1_000_000
_MANIFEST_LIMIT = 1 << 20  # a pack manifest is a few hundred bytes
_DISK_MARGIN = 200 * _MB  # left free on the store's disk after an import
_OWNER = ".owner"  # suffix of the lock file beside a temporary folder, held by its process
_STALE_SECONDS = 3600.0  # a temporary folder without an owner lock (older Quadrat) this old


class ModelUnavailableError(ModelLoadError):
    """A model is not on disk and cannot be fetched now (no network, download failed). The
    message is one sentence naming what failed and the way on (`--model demo`,
    `quadrat models import PACK`)."""


def unavailable(spec: str | ModelSpec, reason: str) -> ModelUnavailableError:
    """The one-line error for a model that is neither installed nor downloadable now."""
    if isinstance(spec, ModelSpec):
        spec = store_key(spec)
    return ModelUnavailableError(
        f"could not download {spec}: {reason}; use --model demo, or install it offline with "
        f"'quadrat models import PACK' (a pack made on a connected machine with "
        f"'quadrat models pack {spec} OUT')"
    )


# ---------------------------------------------------------------------------------------------
# The catalogue


@dataclass(frozen=True)
class ModelOffer:
    """One entry of the model chooser's catalogue."""

    spec: str  # docs/SPEC.md §5.2 model spec
    label: str
    download_bytes: int  # 0 for the bundled demo model
    memory_bytes: int  # approximate memory to run it
    good_at: str
    licence: str
    source: str  # where the weights come from (URL or hub id)


def _memory(weights: int) -> int:
    """Rough memory to run a model: its fp32 weights, a quarter more for a batch of 64 images'
    activations, and ~400 MB for torch itself. A rule of thumb, not a measurement."""
    return int(weights * 1.25) + 400 * _MB


# Download sizes are the fp32 weights of each published checkpoint: parameter count x 4 bytes
# of the open_clip architecture (counted with open_clip 3.3), which is what the hub lists for
# the files: 605 MB (ViT-B-32), 1.71 GB (ViT-L-14), 599 MB (BioCLIP, a ViT-B-16) and
# 3.95 GB (ViT-H-14-378); the file headers add a few tens of kB.
_VIT_B_32 = 151_277_313 * 4
_VIT_B_16 = 149_620_737 * 4
_VIT_L_14 = 427_616_513 * 4
_VIT_H_14_378 = 986_714_881 * 4

_OFFERS: tuple[ModelOffer, ...] = (
    ModelOffer(
        spec=DEMO_SPEC,
        label="Demo model (bundled)",
        download_bytes=0,
        memory_bytes=450 * _MB,
        good_at="Only the demo collection's coloured shapes; instant, no download.",
        licence="same as Quadrat",
        source="bundled with Quadrat",
    ),
    ModelOffer(
        spec="ViT-B-32:laion2b_s34b_b79k",
        label="ViT-B/32 · LAION-2B",
        download_bytes=_VIT_B_32,
        memory_bytes=_memory(_VIT_B_32),
        good_at="Fast general-purpose search; indexes quickly on a laptop CPU.",
        licence="MIT",
        source="laion/CLIP-ViT-B-32-laion2B-s34B-b79K",
    ),
    ModelOffer(
        spec="ViT-L-14:laion2b_s32b_b82k",
        label="ViT-L/14 · LAION-2B",
        download_bytes=_VIT_L_14,
        memory_bytes=_memory(_VIT_L_14),
        good_at="More accurate on fine detail (markings, habitat); about 6x slower, wants a GPU.",
        licence="MIT",
        source="laion/CLIP-ViT-L-14-laion2B-s32B-b82K",
    ),
    ModelOffer(
        spec="hf-hub:imageomics/bioclip",
        label="BioCLIP · TreeOfLife-10M",
        download_bytes=_VIT_B_16,
        memory_bytes=_memory(_VIT_B_16),
        good_at="Species names and taxonomy (trained on the tree of life); weaker on scenes.",
        licence="MIT",
        source="imageomics/bioclip",
    ),
    ModelOffer(
        spec="ViT-H-14-378-quickgelu:dfn5b",
        label="ViT-H/14-378 · DFN-5B",
        download_bytes=_VIT_H_14_378,
        memory_bytes=_memory(_VIT_H_14_378),
        good_at="Among the best open CLIP models on the INQUIRE natural-world benchmark; "
        "needs a large GPU.",
        licence="Apple Sample Code License",
        source="apple/DFN5B-CLIP-ViT-H-14-378",
    ),
)


def model_offers() -> list[ModelOffer]:
    """The models the chooser offers, demo first."""
    return list(_OFFERS)


def _offer(spec: str) -> ModelOffer | None:
    return next((offer for offer in _OFFERS if offer.spec == spec), None)


# ---------------------------------------------------------------------------------------------
# Network: endpoint, offline mode, reachability


def hub_endpoint() -> str:
    """The model hub's base URL (HF_ENDPOINT, as huggingface_hub reads it)."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def offline_mode() -> bool:
    """True when the user asked for no network (HF_HUB_OFFLINE, as huggingface_hub reads it)."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return True
    hub = sys.modules.get("huggingface_hub.constants")  # set programmatically, once imported
    return bool(getattr(hub, "HF_HUB_OFFLINE", False))


def probe(endpoint: str | None = None, timeout: float = PROBE_SECONDS) -> str | None:
    """Whether `endpoint` answers within `timeout` seconds: None if it does, else the reason.

    Any HTTP answer counts (even an error page). The request runs in a daemon thread so that a
    slow name lookup (not covered by socket timeouts) cannot hold the caller longer.
    """
    if offline_mode():
        return "offline mode (HF_HUB_OFFLINE is set)"
    url = endpoint or hub_endpoint()
    host = urllib.parse.urlsplit(url).netloc or url
    outcome: list[str | None] = []

    def attempt() -> None:
        try:
            request = urllib.request.Request(url, method="HEAD", headers=_HEADERS)
            with urllib.request.urlopen(request, timeout=timeout):
                pass
            outcome.append(None)
        except urllib.error.HTTPError:
            outcome.append(None)  # it answered
        except (urllib.error.URLError, OSError, ValueError) as error:
            reason = getattr(error, "reason", error)
            outcome.append(f"{host} cannot be reached ({one_line(reason)})")

    thread = threading.Thread(target=attempt, name="quadrat-probe", daemon=True)
    thread.start()
    thread.join(timeout + 0.5)
    if not outcome:
        return f"{host} did not answer within {timeout:.0f} s (no network?)"
    return outcome[0]


def ensure_reachable(spec: str | ModelSpec, endpoint: str | None = None) -> None:
    """Raise `ModelUnavailableError` within seconds when `spec` cannot be downloaded now."""
    reason = probe(endpoint)
    if reason is not None:
        raise unavailable(spec, reason)


def preflight(spec: str | ModelSpec, store_dir: Path | None, cache_dir: Path | None) -> None:
    """Before torch is imported (seconds): raise `ModelUnavailableError` when `spec` names a
    model that is not in the store, cannot be in open_clip's download cache and cannot be
    downloaded now. Anything else is left to `load_encoder`."""
    parsed = as_model_spec(spec)
    if not parsed.is_named:
        return
    if parsed.kind == "pretrained" and not _open_clip_lists(
        str(parsed.arch), str(parsed.pretrained)
    ):
        return  # a typo: load_encoder says which names are known
    if store_dir is not None and ModelStore(store_dir).folder(parsed) is not None:
        return
    if cache_dir is not None and in_download_cache(parsed, cache_dir):
        return
    ensure_reachable(parsed)


def in_download_cache(spec: str | ModelSpec, cache_dir: Path) -> bool:
    """Whether open_clip's own download cache may hold the named model `spec` (models fetched
    before the store existed load from there offline). Cheap and conservative: for ARCH:TAG any
    cached file counts, since which hub repo a tag maps to is open_clip's to say."""
    parsed = as_model_spec(spec)
    if not parsed.is_named or not cache_dir.is_dir():
        return False
    if parsed.kind == "hf-hub":
        assert parsed.hub_id is not None
        return (cache_dir / f"models--{parsed.hub_id.replace('/', '--')}").is_dir()
    return any(cache_dir.iterdir())


def _open_clip_lists(arch: str, tag: str) -> bool:
    """Whether open_clip ships a config for `arch` and names the pretrained tag `tag`, read
    from its files without importing it (importing it imports torch: seconds)."""
    import importlib.util

    found = importlib.util.find_spec("open_clip")
    if found is None or not found.submodule_search_locations:
        return False
    package = Path(next(iter(found.submodule_search_locations)))
    if not (package / "model_configs" / f"{arch}.json").is_file():
        return False
    try:
        source = (package / "pretrained.py").read_text(encoding="utf-8")
    except OSError:
        return False
    return re.search(rf"\b{re.escape(tag)}\s*=", source) is not None


_HEADERS = {"User-Agent": "quadrat-model-store/1"}


def _origin(url: str) -> tuple[str, str]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme.lower(), parts.netloc.lower()


def _hub_token() -> str | None:
    """The user's hub token (HF_TOKEN, or huggingface_hub's saved login), for gated models."""
    token = os.environ.get("HF_TOKEN", "").strip()
    if token:
        return token
    try:
        from huggingface_hub import get_token
    except ImportError:
        return None
    return get_token() or None


class _NoAuthAcrossOrigins(urllib.request.HTTPRedirectHandler):
    """Follow redirects, dropping the Authorization header when one leads to another origin:
    the hub sends downloads to a CDN with signed links, and a token must stay with the hub."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and _origin(newurl) != _origin(req.full_url):
            new.remove_header("Authorization")
        return new


_opener = urllib.request.build_opener(_NoAuthAcrossOrigins())


# ---------------------------------------------------------------------------------------------
# The store


@dataclass(frozen=True)
class InstalledModel:
    """A model that can be loaded without a network."""

    spec: str
    size_bytes: int
    path: Path | None  # its folder in the store; None for the bundled demo model
    origin: str  # "bundled" | "pack" | "download" | "file"
    licence: str = ""
    source: str = ""
    model_key: str = ""  # the identity load_encoder gives it ("" when known only at load)


def _slug(key: str) -> str:
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", key).strip("._-")[:80]
    return f"{readable}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


class _Missing(Exception):
    """The server has no such file (404): try the next candidate name."""


@dataclass(frozen=True)
class _Plan:
    """Where a named model's files come from."""

    key: str
    urls: tuple[str, ...]  # weight file candidates, best first
    config_url: str | None  # None: the config is built from open_clip's own registry
    config: dict[str, Any] | None
    source: str


class ModelStore:
    """Installed models (one folder each), downloads, offline packs.

    `endpoint` is the model hub's base URL (HF_ENDPOINT or huggingface.co); tests point it at a
    local server.
    """

    chunk_bytes = 1 << 20
    timeout_seconds = 30.0

    def __init__(self, root: Path, *, endpoint: str | None = None) -> None:
        self.root = Path(root)
        self.endpoint = (endpoint or hub_endpoint()).rstrip("/")
        self.bytes_fetched = 0  # over the network, by this store object (resume shows here)

    # -- what is installed ---------------------------------------------------------------------

    def folder(self, spec: str | ModelSpec) -> Path | None:
        """The store folder of an installed named model, or None (cheap: no torch)."""
        parsed = as_model_spec(spec)
        if not parsed.is_named:
            return None
        folder = self.root / _slug(store_key(parsed))
        if (folder / MANIFEST_NAME).is_file() and (folder / WEIGHTS_NAME).is_file():
            return folder
        return None

    def model_key(self, folder: Path, spec: str | ModelSpec) -> str:
        """The model key `load_encoder` gives the named model installed in `folder`: its name,
        or for one installed from a pack the name and weights hash (`pack_model_key`), so its
        vectors stay apart."""
        key = store_key(spec)
        manifest = _read_manifest(folder / MANIFEST_NAME) or {}
        digest = manifest.get("sha256")
        if manifest.get("origin") == "pack" and isinstance(digest, str):
            return pack_model_key(key, digest)  # packs installed before their keys said so, too
        return key

    def is_installed(self, spec: str | ModelSpec) -> bool:
        """True when `spec` loads without a network: the demo, an existing checkpoint file or
        model folder, or a named model in the store. Cheap (no torch import)."""
        parsed = as_model_spec(spec)
        if parsed.kind == "demo":
            return True
        if parsed.kind == "checkpoint":
            return parsed.path is not None and parsed.path.is_file()
        if parsed.kind == "local-dir":
            return parsed.path is not None and (parsed.path / CONFIG_NAME).is_file()
        return self.folder(parsed) is not None

    def installed(self) -> list[InstalledModel]:
        """The demo model, then every model in the store (by spec)."""
        demo = demo_weights_path()
        found = [InstalledModel(DEMO_SPEC, demo.stat().st_size, None, "bundled", "", "")]
        entries = []
        self.remove_stale()
        if self.root.is_dir():
            for folder in sorted(self.root.iterdir()):
                if folder.name.startswith("."):
                    continue  # partial downloads, imports in progress
                manifest = _read_manifest(folder / MANIFEST_NAME)
                if manifest is not None:
                    entries.append(_installed_from(folder, manifest))
        return found + sorted(entries, key=lambda entry: entry.spec)

    def partial_bytes(self, spec: str) -> int:
        """Bytes of an interrupted download of `spec` waiting to be resumed."""
        folder = self.root / _PARTIAL / _slug(store_key(spec))
        if not folder.is_dir():
            return 0
        return sum(p.stat().st_size for p in folder.glob("*.part"))

    # -- download ------------------------------------------------------------------------------

    def download(
        self,
        spec: str | ModelSpec,
        progress: ProgressCallback = no_progress,
        cancel: CancelToken | None = None,
    ) -> InstalledModel:
        """Download a named model into the store (already installed: returned as it is).

        Progress counts bytes. A cancel raises `Cancelled` and keeps the partial file, which the
        next call resumes. Offline or unreachable -> `ModelUnavailableError` within seconds.
        """
        parsed = as_model_spec(spec)
        if parsed.kind == "demo":
            return self.installed()[0]
        key = store_key(parsed)
        existing = self.folder(parsed)
        if existing is not None:
            manifest = _read_manifest(existing / MANIFEST_NAME) or {}
            return _installed_from(existing, manifest)
        ensure_reachable(key, self.endpoint)
        plan = self._plan(parsed)
        partial = self.root / _PARTIAL / _slug(key)
        partial.mkdir(parents=True, exist_ok=True)

        config = plan.config
        if config is None:
            assert plan.config_url is not None
            config_part = partial / f"{CONFIG_NAME}.part"
            config_part.unlink(missing_ok=True)  # small: always fetched whole
            try:
                self._fetch(plan.config_url, config_part, key, no_progress, cancel)
            except _Missing:
                raise unavailable(key, f"{plan.source} has no {CONFIG_NAME}") from None
            try:
                config = json.loads(config_part.read_text(encoding="utf-8"))
            except ValueError as error:
                raise ModelLoadError(f"{plan.source} has an unreadable {CONFIG_NAME}") from error
            finally:
                config_part.unlink(missing_ok=True)
            if not isinstance(config, dict) or "model_cfg" not in config:
                raise ModelLoadError(f"{plan.source} is not an open_clip model (no model_cfg)")

        weights_part: Path | None = None
        for url in plan.urls:
            name = urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1] or WEIGHTS_NAME
            candidate = partial / f"{name}.part"
            try:
                self._fetch(url, candidate, key, progress, cancel)
            except _Missing:
                candidate.unlink(missing_ok=True)
                continue
            weights_part = candidate
            break
        if weights_part is None:
            raise unavailable(key, f"{plan.source} has no open_clip weights file")

        origin_name = weights_part.name.removesuffix(".part")
        installed = self._install(
            key,
            config,
            weights_part,
            convert=not origin_name.endswith(".safetensors"),
            origin="download",
            licence=_licence_of(key),
            source=plan.source,
        )
        shutil.rmtree(partial, ignore_errors=True)
        return installed

    def _plan(self, parsed: ModelSpec) -> _Plan:
        key = store_key(parsed)
        if parsed.kind == "hf-hub":
            assert parsed.hub_id is not None
            base = f"{self.endpoint}/{parsed.hub_id}/resolve/main"
            return _Plan(
                key,
                tuple(f"{base}/{name}" for name in _HUB_WEIGHTS),
                f"{base}/{CONFIG_NAME}",
                None,
                parsed.hub_id,
            )
        assert parsed.arch is not None and parsed.pretrained is not None
        config, cfg = _pretrained_config(parsed.arch, parsed.pretrained)
        hub = str(cfg.get("hf_hub") or "")
        if hub:
            repo_id = "/".join(hub.split("/")[:2])
            file_name = hub[len(repo_id) :].strip("/")
            base = f"{self.endpoint}/{repo_id}/resolve/main"
            names = (file_name,) if file_name else _HUB_WEIGHTS
            return _Plan(key, tuple(f"{base}/{n}" for n in names), None, config, repo_id)
        url = str(cfg.get("url") or "")
        if not url:
            raise ModelLoadError(f"open_clip names no download for {key}")
        return _Plan(key, (url,), None, config, url)

    def _fetch(
        self,
        url: str,
        part: Path,
        key: str,
        progress: ProgressCallback,
        cancel: CancelToken | None,
    ) -> None:
        """Fetch `url` into `part`, resuming from its current size with an HTTP Range."""
        have = part.stat().st_size if part.exists() else 0
        headers = dict(_HEADERS)
        if have:
            headers["Range"] = f"bytes={have}-"
        token = _hub_token()
        if token and _origin(url) == _origin(self.endpoint):
            headers["Authorization"] = f"Bearer {token}"  # only to the hub, never elsewhere
        try:
            response = _opener.open(
                urllib.request.Request(url, headers=headers), timeout=self.timeout_seconds
            )
        except urllib.error.HTTPError as error:
            if error.code == 416 and have:
                return  # nothing left to fetch: the partial file is whole
            if error.code in (401, 403, 404):
                raise _Missing() from None
            raise unavailable(key, f"the server answered HTTP {error.code}") from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise unavailable(key, one_line(reason)) from None
        with response:
            start = have if response.status == 206 else 0
            length = int(response.headers.get("Content-Length") or 0)
            total = start + length if length else 0
            expected = _sha256_etag(response.headers)
            meter = RateMeter(total)
            done = start
            progress(meter.update(done, key))
            with part.open("ab" if start else "wb") as handle:
                while True:
                    if cancel is not None and cancel.cancelled:
                        raise Cancelled()
                    try:
                        chunk = response.read(self.chunk_bytes)
                    except OSError as error:
                        raise unavailable(
                            key, f"the download broke off: {one_line(error)}"
                        ) from None
                    if not chunk:
                        break
                    handle.write(chunk)
                    done += len(chunk)
                    self.bytes_fetched += len(chunk)
                    progress(meter.update(done, key))  # per chunk: views throttle their own
        if total and part.stat().st_size != total:
            raise unavailable(key, "the download broke off (run it again to resume)")
        if expected and file_sha256(part) != expected:
            part.unlink(missing_ok=True)
            raise ModelLoadError(
                f"the download of {key} was damaged (its sha256 does not match); run it again"
            )

    # -- installing ----------------------------------------------------------------------------

    def _install(
        self,
        key: str,
        config: dict[str, Any],
        weights: Path,
        *,
        convert: bool,
        origin: str,
        licence: str,
        source: str,
    ) -> InstalledModel:
        """Move a config and weights into the store atomically (temporary folder, then rename)."""
        with self._incoming() as temp:
            (temp / CONFIG_NAME).write_text(json.dumps(config, indent=2), encoding="utf-8")
            target = temp / WEIGHTS_NAME
            if convert:
                _to_safetensors(weights, target)
            else:
                shutil.copyfile(weights, target)
            manifest = {
                "spec": key,
                "model_key": key,
                "sha256": file_sha256(target),
                "size_bytes": target.stat().st_size,
                "licence": licence,
                "source": source,
                "origin": origin,
                "installed": datetime.now(UTC).isoformat(timespec="seconds"),
            }
            (temp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
            folder = self._place(temp, self.root / _slug(key))
        return _installed_from(folder, manifest)

    @contextlib.contextmanager
    def _incoming(self) -> Iterator[Path]:
        """A temporary folder inside the store (same file system, so the rename is atomic);
        removed on any failure, so a failed install leaves nothing behind. It holds an owner
        lock while in use, so that one left by a killed process is known to be stale."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.remove_stale()
        temp = Path(tempfile.mkdtemp(prefix=".incoming-", dir=self.root))
        lock = _owner_lock(temp)  # beside the folder: it must not move into the store with it
        try:
            owner = _hold_owner_lock(lock)
        except BaseException:
            shutil.rmtree(temp, ignore_errors=True)
            raise
        try:
            yield temp
        finally:
            shutil.rmtree(temp, ignore_errors=True)
            owner.close()
            lock.unlink(missing_ok=True)

    def remove_stale(self) -> None:
        """Remove what killed imports and removals left behind: temporary folders whose owner
        is gone, and the pieces of interrupted replacements (an old copy whose model folder is
        missing is put back). Best effort: a store on a read-only disk is left as it is."""
        if not self.root.is_dir():
            return
        with contextlib.suppress(OSError):
            for entry in list(self.root.iterdir()):
                name = entry.name
                if name.startswith(".incoming-") and name.endswith(_OWNER):
                    if not entry.with_name(name.removesuffix(_OWNER)).exists() and _owner_gone(
                        entry.with_name(name.removesuffix(_OWNER))
                    ):
                        entry.unlink(missing_ok=True)
                    continue
                if not entry.is_dir() or entry.is_symlink():
                    continue
                if name.startswith(".incoming-") and _owner_gone(entry):
                    log.info("removing %s, left by an import that did not finish", entry)
                    shutil.rmtree(entry, ignore_errors=True)
                    _owner_lock(entry).unlink(missing_ok=True)
                elif name.startswith(".old-"):
                    # `_place` names it .old-FOLDER-PID; a living PID is replacing it right now.
                    pid = re.search(r"-(\d+)$", name)
                    if pid is None or _pid_alive(int(pid.group(1))):
                        continue
                    folder = self.root / name.removeprefix(".old-")[: pid.start() - 5]
                    if not folder.exists():
                        with contextlib.suppress(OSError):
                            os.replace(entry, folder)  # killed mid-replacement: put it back
                            continue
                    shutil.rmtree(entry, ignore_errors=True)
                elif name.startswith(".removing-"):
                    shutil.rmtree(entry, ignore_errors=True)

    def _place(self, temp: Path, folder: Path) -> Path:
        """Rename `temp` to `folder`, replacing an older copy only once the new one is whole."""
        old = None
        if folder.exists():
            old = folder.with_name(f".old-{folder.name}-{os.getpid()}")
            os.replace(folder, old)
        os.replace(temp, folder)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return folder

    # -- packs ---------------------------------------------------------------------------------

    def pack(
        self, spec: str | ModelSpec, out: Path, progress: ProgressCallback = no_progress
    ) -> Path:
        """Write an offline pack of `spec` at `out` (a folder: a file named after the model in
        it), downloading the model first when it is not installed. Returns the pack's path."""
        parsed = as_model_spec(spec)
        if parsed.kind == "demo":
            raise BadInputError("the demo model is bundled with Quadrat: it needs no pack")
        key = store_key(parsed)
        folder = self.folder(parsed)
        if folder is None:
            self.download(parsed, progress)
            folder = self.folder(parsed)
            assert folder is not None
        manifest = _read_manifest(folder / MANIFEST_NAME) or {}
        out = Path(out).expanduser()
        if out.is_dir():
            out = out / f"{_slug(key)}{PACK_SUFFIX}"
        files: dict[str, dict[str, Any]] = {
            name: {"sha256": file_sha256(folder / name), "size": (folder / name).stat().st_size}
            for name in (CONFIG_NAME, WEIGHTS_NAME)
        }
        pack_manifest = {
            "format": PACK_FORMAT,
            "version": PACK_VERSION,
            "spec": key,
            "model_key": key,
            "licence": manifest.get("licence", ""),
            "source": manifest.get("source", ""),
            "files": files,
        }
        total = sum(int(entry["size"]) for entry in files.values())
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, temp_name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
        os.close(fd)
        try:
            meter, done = RateMeter(total), 0
            with zipfile.ZipFile(temp_name, "w", compression=zipfile.ZIP_STORED) as archive:
                archive.writestr(MANIFEST_NAME, json.dumps(pack_manifest, indent=2))
                for name in files:
                    with (folder / name).open("rb") as src, archive.open(name, "w") as dst:
                        while chunk := src.read(1 << 20):
                            dst.write(chunk)
                            done += len(chunk)
                            progress(meter.update(done, f"packing {key}"))
            # mkstemp's file is private (0600); a pack is made to be carried to other machines
            # and users, so it gets an ordinary file's permissions.
            os.chmod(temp_name, 0o644)
            os.replace(temp_name, out)
        except BaseException:
            Path(temp_name).unlink(missing_ok=True)
            raise
        return out

    def import_pack(
        self, pack: Path, progress: ProgressCallback = no_progress, *, replace: bool = False
    ) -> InstalledModel:
        """Install an offline pack after checking it: its entries (plain files only, each at
        most the size its manifest gives, read as a stream and hashed on the way), every
        sha256, and that its weights fit the architecture its name implies. A model installed
        from a pack gets a model key of its own (see the module docstring). An installed model
        of that name with other weights is replaced only when `replace` is given. A bad pack
        -> one-line `BadInputError`, and nothing is installed or left behind."""
        pack = Path(pack).expanduser()
        if not pack.is_file():
            raise BadInputError(f"model pack not found: {pack}")
        try:
            with zipfile.ZipFile(pack) as archive:
                manifest = _pack_manifest(archive, pack)
                key = str(manifest["spec"])
                parsed = as_model_spec(key)
                files: dict[str, Any] = manifest["files"]
                digest = str(files[WEIGHTS_NAME]["sha256"])
                existing = self.folder(parsed)
                kept = _read_manifest(existing / MANIFEST_NAME) if existing else None
                if existing is not None and kept is not None and kept.get("sha256") == digest:
                    return _installed_from(existing, kept)  # these very weights: nothing to do
                if existing is not None and not replace:
                    raise BadInputError(
                        f"{key} is already installed with other weights "
                        f"({(kept or {}).get('origin', 'unknown origin')}); nothing was installed; "
                        "to replace it give --replace (libraries indexed with the installed one "
                        "will need indexing again)"
                    )
                total = sum(int(entry["size"]) for entry in files.values())
                self.root.mkdir(parents=True, exist_ok=True)
                _check_room(self.root, total, pack)
                meter, done = RateMeter(total), 0
                with self._incoming() as temp:
                    for name, entry in files.items():
                        done = _extract(
                            archive, name, entry, temp / name, pack, done, meter, progress, key
                        )
                    _check_config(temp / CONFIG_NAME, pack)
                    _check_claim(key, parsed, temp, pack)
                    installed = {
                        "spec": key,
                        "model_key": pack_model_key(key, digest),
                        "sha256": digest,
                        "size_bytes": int(files[WEIGHTS_NAME]["size"]),
                        "licence": str(manifest.get("licence", "")),
                        "source": str(manifest.get("source", "")),
                        "origin": "pack",
                        "pack": pack.name,
                        "installed": datetime.now(UTC).isoformat(timespec="seconds"),
                    }
                    (temp / MANIFEST_NAME).write_text(json.dumps(installed, indent=2))
                    folder = self._place(temp, self.root / _slug(key))
        except (
            zipfile.BadZipFile,
            zipfile.LargeZipFile,
            EOFError,
            NotImplementedError,
            zlib.error,
        ) as error:
            raise BadInputError(
                f"{pack} is not a readable model pack ({one_line(error)}); nothing was installed"
            ) from None
        return _installed_from(folder, installed)

    # -- removing and importing files --------------------------------------------------------

    def remove(self, spec: str) -> None:
        """Delete an installed model (and any partial download of it) from the store."""
        parsed = as_model_spec(spec)
        if parsed.kind == "demo":
            raise BadInputError("the demo model is bundled with Quadrat and cannot be removed")
        if parsed.kind in ("checkpoint", "local-dir"):
            entry = next((m for m in self.installed() if m.spec == parsed.spec), None)
            if entry is None or entry.path is None:
                raise BadInputError(f"{spec} is not in the model store (its files are yours)")
            folder: Path | None = entry.path
        else:
            folder = self.folder(parsed)
            shutil.rmtree(self.root / _PARTIAL / _slug(store_key(parsed)), ignore_errors=True)
        if folder is None:
            raise BadInputError(f"{spec} is not installed")
        trash = folder.with_name(f".removing-{folder.name}")
        os.replace(folder, trash)  # gone from the store at once, even if deleting is slow
        shutil.rmtree(trash, ignore_errors=True)

    def import_file(self, spec_or_path: str) -> InstalledModel:
        """Copy a model the user picks into the store: an offline pack, an open_clip model
        folder (`local-dir:` or a plain folder path), or a checkpoint file named with its
        architecture (`ARCH:/path/file`). The returned spec loads it from the store; the model
        key (a content hash for files) is the same as loading the original."""
        text = spec_or_path.strip()
        as_path = Path(text).expanduser()
        if as_path.is_file() and zipfile.is_zipfile(as_path):
            return self.import_pack(as_path)
        if as_path.is_dir():
            text = f"local-dir:{as_path}"
        elif as_path.is_file():
            raise BadInputError(
                f"say which architecture {as_path.name} is: ARCH:{as_path} (e.g. ViT-B-32:...)"
            )
        parsed = as_model_spec(text)
        if parsed.kind not in ("checkpoint", "local-dir"):
            raise BadInputError(f"'{text}' is not a model file or folder on this machine")
        assert parsed.path is not None
        source = parsed.path.resolve()
        if parsed.kind == "local-dir":
            config = source / CONFIG_NAME
            weights = next(
                (source / n for n in _LOCAL_WEIGHTS if (source / n).is_file()),
                None,
            )
            if not config.is_file() or weights is None:
                raise BadInputError(
                    f"{source} is not an open_clip model folder ({CONFIG_NAME} and weights)"
                )
            _check_config(config, source)
            copies = [config, weights]
        else:
            if not source.is_file():
                raise BadInputError(f"model file not found: {source}")
            weights, copies = source, [source]
        digest = file_sha256(weights)
        folder = self.root / _slug(f"file:{digest}")
        with self._incoming() as temp:
            for path in copies:
                shutil.copyfile(path, temp / path.name)
            if parsed.kind == "local-dir":
                spec = f"local-dir:{folder}"
            else:
                spec = f"{parsed.arch}:{folder / weights.name}"
            manifest = {
                "spec": spec,
                "model_key": "",
                "sha256": digest,
                "size_bytes": weights.stat().st_size,
                "licence": "",
                "source": str(source),
                "origin": "file",
                "installed": datetime.now(UTC).isoformat(timespec="seconds"),
            }
            (temp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
            self._place(temp, folder)
        return _installed_from(folder, manifest)


_LOCAL_WEIGHTS = (
    "open_clip_model.safetensors",
    "open_clip_pytorch_model.safetensors",
    "model.safetensors",
    "open_clip_pytorch_model.bin",
    "pytorch_model.bin",
    "open_clip_pytorch_model.pth",
    "model.pth",
)


# ---------------------------------------------------------------------------------------------
# Helpers


def _lock(handle: IO[bytes]) -> bool:
    """Take an exclusive lock on an open file without waiting: False when another process
    holds it. The operating system drops the lock when its process dies, even by a kill."""
    try:
        if sys.platform == "win32":
            import msvcrt

            msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
        else:
            import fcntl

            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _owner_lock(folder: Path) -> Path:
    return folder.with_name(folder.name + _OWNER)


def _hold_owner_lock(path: Path) -> IO[bytes]:
    """Create `path` and hold its lock until the returned file is closed."""
    handle = path.open("wb")
    if not _lock(handle):  # a fresh file nobody else knows: cannot happen, but say so
        handle.close()
        raise OSError(f"could not lock {path}")
    return handle


def _owner_gone(folder: Path) -> bool:
    """Whether the process that made a temporary folder has gone: its owner lock is free, or
    (a folder made before owner locks, or in the instant before its lock) it is old."""
    try:
        with _owner_lock(folder).open("rb+") as handle:
            return _lock(handle)  # closing the file releases the lock again
    except FileNotFoundError:
        try:
            return time.time() - folder.stat().st_mtime > _STALE_SECONDS
        except FileNotFoundError:
            return True  # an orphaned lock file's folder: nothing to wait for
        except OSError:
            return False
    except OSError:
        return False


def _pid_alive(pid: int) -> bool:
    """Whether process `pid` runs (POSIX); elsewhere assumed to, so nothing is touched."""
    if sys.platform == "win32":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _read_manifest(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("spec"), str) else None


def _installed_from(folder: Path, manifest: dict[str, Any]) -> InstalledModel:
    spec, origin = str(manifest.get("spec", "")), str(manifest.get("origin", "download"))
    key = str(manifest.get("model_key", ""))
    if origin == "pack" and isinstance(manifest.get("sha256"), str):
        key = pack_model_key(spec, manifest["sha256"])  # as load_encoder gives it
    return InstalledModel(
        spec=spec,
        size_bytes=int(manifest.get("size_bytes", 0)),
        path=folder,
        origin=origin,
        licence=str(manifest.get("licence", "")),
        source=str(manifest.get("source", "")),
        model_key=key,
    )


def _licence_of(key: str) -> str:
    offer = _offer(key)
    return offer.licence if offer else "see the source's model card"


def _sha256_etag(headers: Any) -> str | None:
    """The hub serves large files with their sha256 as (linked) ETag: check it when given."""
    for name in ("X-Linked-Etag", "ETag"):
        value = str(headers.get(name) or "").strip().strip('"').removeprefix("W/").strip('"')
        if re.fullmatch(r"[0-9a-f]{64}", value):
            return value
    return None


def _pretrained_config(arch: str, tag: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The open_clip config a direct `ARCH:TAG` load uses (the architecture's registered
    model_cfg and the tag's preprocessing), and the tag's pretrained entry."""
    import dataclasses

    import open_clip
    from open_clip.pretrained import get_pretrained_cfg
    from open_clip.transform import PreprocessCfg

    from engine.models.encoders import known_arch  # lazy: building models needs torch

    known_arch(arch)
    cfg = get_pretrained_cfg(arch, tag)
    if not cfg:
        tags = ", ".join(open_clip.list_pretrained_tags_by_model(arch)) or "none"
        raise ModelLoadError(f"unknown pretrained tag '{tag}' for {arch}; known tags: {tags}")
    fields = {field.name for field in dataclasses.fields(PreprocessCfg)}
    preprocess = {k: v for k, v in cfg.items() if k in fields}
    return {"model_cfg": open_clip.get_model_config(arch), "preprocess_cfg": preprocess}, cfg


def _to_safetensors(source: Path, target: Path) -> None:
    """Store a PyTorch weights file as safetensors (read with the safe loader)."""
    from safetensors.torch import save_file

    from engine.models.encoders import read_weights  # lazy: needs torch

    state = {k: v.contiguous() for k, v in read_weights(source).items()}
    save_file(state, str(target))


def pack_model_key(spec: str, sha256: str) -> str:
    """The model key of a model installed from a pack: its name and its weights' hash, so its
    vectors are never taken for the published model's (nor another pack's of that name)."""
    return f"{spec} [pack sha256-{sha256[:16]}]"


def _pack_manifest(archive: zipfile.ZipFile, pack: Path) -> dict[str, Any]:
    """The manifest of a pack, checked for shape: exactly the expected plain files (no links,
    folders, paths or twins), a known version, a sha256 and a size for each file."""
    refuse = f"{pack} is not a Quadrat model pack"
    expected = {MANIFEST_NAME, CONFIG_NAME, WEIGHTS_NAME}
    entries = archive.infolist()
    names = [info.filename for info in entries]
    for info in entries:
        kind = stat.S_IFMT(info.external_attr >> 16)
        if info.is_dir() or (info.create_system == 3 and kind not in (0, stat.S_IFREG)):
            what = "a link" if kind == stat.S_IFLNK else "a folder or special file"
            raise BadInputError(
                f"{refuse} (its entry {info.filename!r} is {what}, not a plain file); "
                "nothing was installed"
            )
        if info.filename not in expected:
            raise BadInputError(
                f"{refuse} (it holds an unexpected entry {info.filename!r}); nothing was installed"
            )
    if len(set(names)) != len(names):
        raise BadInputError(f"{refuse} (it holds an entry twice); nothing was installed")
    if MANIFEST_NAME not in names:
        raise BadInputError(f"{refuse} (no {MANIFEST_NAME}); nothing was installed")
    unreadable = f"{refuse} (unreadable {MANIFEST_NAME}); nothing was installed"
    try:
        with archive.open(MANIFEST_NAME) as handle:
            raw = handle.read(_MANIFEST_LIMIT + 1)
        if len(raw) > _MANIFEST_LIMIT:
            raise BadInputError(f"{refuse} ({MANIFEST_NAME} is too large); nothing was installed")
        manifest = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested beyond any real manifest
        raise BadInputError(unreadable) from None
    if not isinstance(manifest, dict) or manifest.get("format") != PACK_FORMAT:
        raise BadInputError(f"{refuse} (unknown format); nothing was installed")
    version = manifest.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise BadInputError(
            f"{refuse} (its version {str(version)[:40]!r} is not a version number); "
            "nothing was installed"
        )
    if version > PACK_VERSION:
        raise BadInputError(f"{pack} was made by a newer Quadrat; nothing was installed")
    files = manifest.get("files")
    if (
        not isinstance(files, dict)
        or set(files) != {CONFIG_NAME, WEIGHTS_NAME}
        or not set(files) <= set(names)
        or not all(
            isinstance(entry, dict)
            and isinstance(entry.get("sha256"), str)
            and re.fullmatch(r"[0-9a-f]{64}", entry["sha256"])
            and isinstance(entry.get("size"), int)
            and not isinstance(entry.get("size"), bool)
            and entry["size"] >= 0
            for entry in files.values()
        )
    ):
        raise BadInputError(f"{refuse} (its file list is wrong); nothing was installed")
    if not isinstance(manifest.get("spec"), str):
        raise BadInputError(f"{refuse} (it names no model); nothing was installed")
    store_key(manifest["spec"])  # a named model, or BadInputError
    return manifest


def _check_room(root: Path, total: int, pack: Path) -> None:
    """Refuse an import its declared sizes say the store's disk cannot hold."""
    free = shutil.disk_usage(root).free
    if total + _DISK_MARGIN > free:
        raise BadInputError(
            f"{pack} needs {total / 1e9:.1f} GB and the model store's disk has "
            f"{free / 1e9:.1f} GB free; free some space (or check the pack); nothing was installed"
        )


def _extract(
    archive: zipfile.ZipFile,
    name: str,
    entry: dict[str, Any],
    target: Path,
    pack: Path,
    done: int,
    meter: RateMeter,
    progress: ProgressCallback,
    key: str,
) -> int:
    """Stream one entry to `target`, hashing it, and stop as soon as it outgrows the size the
    manifest gives (a zip bomb is never written out). Returns the bytes done so far."""
    limit = int(entry["size"])
    digest, written = hashlib.sha256(), 0
    with archive.open(name) as src, target.open("wb") as dst:
        while chunk := src.read(min(1 << 20, limit - written + 1)):
            written += len(chunk)
            if written > limit:
                raise BadInputError(
                    f"{pack} is damaged or was altered: {name} is larger than its manifest says "
                    f"({limit} bytes); nothing was installed"
                )
            digest.update(chunk)
            dst.write(chunk)
            done += len(chunk)
            progress(meter.update(done, f"importing {key}"))
    if written != limit or digest.hexdigest() != entry["sha256"]:
        raise BadInputError(
            f"{pack} is damaged or was altered: {name} fails its sha256 check; "
            "nothing was installed"
        )
    return done


def _check_claim(key: str, parsed: ModelSpec, folder: Path, pack: Path) -> None:
    """Check a pack's model against what its name implies, from outside the pack: for ARCH:TAG
    the architecture open_clip defines for ARCH (config and every weight's shape); for
    hf-hub:ORG/NAME, whose published files cannot be seen offline, that the weights fit the
    pack's own config. Reads the weights' header only (the model is built without memory)."""
    import open_clip
    import torch
    from safetensors import safe_open

    from engine.models.encoders import apply_state_dict, quiet_random_init  # lazy: needs torch

    config = json.loads((folder / CONFIG_NAME).read_text(encoding="utf-8"))
    claim = f"{pack} claims to be {key}"
    if parsed.kind == "pretrained":
        assert parsed.arch is not None and parsed.pretrained is not None
        if parsed.pretrained not in open_clip.list_pretrained_tags_by_model(parsed.arch):
            raise BadInputError(
                f"{claim}, which this Quadrat's open_clip does not know; nothing was installed"
            )
        if config.get("model_cfg") != open_clip.get_model_config(parsed.arch):
            raise BadInputError(
                f"{claim} but its config is not the {parsed.arch} architecture; "
                "nothing was installed"
            )
        name = parsed.arch
    else:
        name = f"local-dir:{folder}"
    try:
        with safe_open(str(folder / WEIGHTS_NAME), framework="pt") as weights:
            shapes = {k: weights.get_slice(k).get_shape() for k in weights.keys()}  # noqa: SIM118
    except Exception as error:  # safetensors raises its own error types
        raise BadInputError(
            f"{claim} but its weights are not a valid safetensors file ({one_line(error, 200)}); "
            "nothing was installed"
        ) from None
    try:
        with quiet_random_init():
            model = open_clip.create_model(name, device="meta", load_weights=False)
    except Exception as error:
        raise BadInputError(
            f"{claim} but its config describes no model open_clip can build "
            f"({one_line(error, 200)}); nothing was installed"
        ) from None
    fake = {k: torch.empty(shape, device="meta") for k, shape in shapes.items()}
    try:
        apply_state_dict(model, fake, folder / WEIGHTS_NAME, name)
    except ModelLoadError:
        size = (folder / WEIGHTS_NAME).stat().st_size
        raise BadInputError(
            f"{claim} but its weights ({size / _MB:.1f} MB) do not have the shapes of that "
            "model's architecture: it is another model; nothing was installed"
        ) from None


def _check_config(path: Path, origin: Path) -> None:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = None
    if not isinstance(config, dict) or "model_cfg" not in config:
        raise BadInputError(f"{origin} holds no valid open_clip config; nothing was installed")
