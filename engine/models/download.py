"""Downloads from the model hub into the model store.

An encoder (one config, one weights file) comes through a small urllib client: byte progress,
cancel between chunks, `Range` resume of the partial file, and the file's sha256 as the hub
gives it (`X-Linked-Etag` on its redirect to the CDN, never the CDN's own ETag). It reports to
our callback, stops on our `CancelToken` and keeps the partial file where we can show and
resume it. Image generators and VLMs are multi-file repositories: they come through
huggingface_hub (`engine.models.snapshots`). A model that cannot be fetched now is a one-line
`ModelUnavailableError` within seconds (`engine.models.hub`).
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from engine.errors import Cancelled, ModelLoadError, one_line
from engine.files import file_sha256
from engine.models.folders import (
    CONFIG_NAME,
    MANIFEST_NAME,
    PARTIAL_DIR,
    WEIGHTS_NAME,
    InstalledModel,
    StoreFolders,
    folder_slug,
    installed_from,
    read_manifest,
    whole_safetensors,
)
from engine.models.hub import (
    HEADERS,
    ensure_reachable,
    hub_endpoint,
    sha256_of_etag,
    unavailable,
)
from engine.models.offers import licence_of, offer_for, repository_role
from engine.models.spec import ModelSpec, as_model_spec, store_key
from engine.progress import CancelToken, ProgressCallback, RateMeter, no_progress

_HUB_WEIGHTS = ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")


def _origin(url: str) -> tuple[str, str]:
    """A URL's scheme and host: where a hub token may be sent."""
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


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Follow no redirect here: `_open` follows them itself, to read the hub's sha256 from the
    redirect (`X-Linked-Etag`) and to drop the token when one leads to another origin."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        return None


_opener = urllib.request.build_opener(_NoRedirects())
_REDIRECTS = (301, 302, 303, 307, 308)
_MAX_REDIRECTS = 5


class _RefusedRedirect(urllib.error.URLError):
    """A redirect `_open` will not follow (its reason is the one line said)."""


def _followable(url: str, came_from: str) -> None:
    """Refuse a redirect off http(s) (urllib's opener would read a local file:, a data: or an
    ftp: URL and install what it found as the model) or from https down to http."""
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme not in ("http", "https"):
        raise _RefusedRedirect(
            f"the hub redirected to a {scheme or 'relative'}: URL, never followed"
        )
    if scheme == "http" and urllib.parse.urlsplit(came_from).scheme.lower() == "https":
        raise _RefusedRedirect("the hub redirected from https to plain http, never followed")


def _open(url: str, headers: dict[str, str], timeout: float) -> tuple[Any, str | None]:
    """Open `url`, following redirects, and the sha256 the hub gives for the file.

    The hub sends large files to a CDN with a signed link and puts the file's sha256 in
    `X-Linked-Etag` on that redirect (as huggingface_hub reads it); the CDN's own ETag is no
    sha256 of the file, so it is never trusted. A file the hub serves itself carries its sha256
    as ETag. The Authorization header stays with the first origin (a token never leaves the hub).
    """
    first = _origin(url)
    expected: str | None = None
    for _ in range(_MAX_REDIRECTS + 1):
        sent = dict(headers)
        if _origin(url) != first:
            sent.pop("Authorization", None)
        try:
            response = _opener.open(urllib.request.Request(url, headers=sent), timeout=timeout)
        except urllib.error.HTTPError as error:
            if error.code not in _REDIRECTS or not error.headers.get("Location"):
                raise
            if _origin(url) == first and expected is None:
                expected = sha256_of_etag(error.headers.get("X-Linked-Etag"))
            error.close()
            came_from, url = url, urllib.parse.urljoin(url, str(error.headers["Location"]))
            _followable(url, came_from)
            continue
        if _origin(url) == first and expected is None:
            expected = sha256_of_etag(response.headers.get("X-Linked-Etag")) or sha256_of_etag(
                response.headers.get("ETag")
            )
        return response, expected
    raise urllib.error.URLError(f"more than {_MAX_REDIRECTS} redirects")


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


class HubDownloads(StoreFolders):
    """A model store that downloads named models from the hub.

    `endpoint` is the model hub's base URL (HF_ENDPOINT or huggingface.co); tests point it at a
    local server.
    """

    chunk_bytes = 1 << 20
    timeout_seconds = 30.0

    def __init__(self, root: Path, *, endpoint: str | None = None) -> None:
        super().__init__(root)
        self.endpoint = (endpoint or hub_endpoint()).rstrip("/")
        self.bytes_fetched = 0  # over the network, by this store object (resume shows here)

    # -- generators and VLMs: whole repositories ----------------------------------------------
    # The loader reads StoreFolders for encoders only, so the catalogue's roles are known here.

    def repository_folder(self, spec: str) -> Path:
        """Where the catalogue's generator or VLM `spec` is (or would be) installed: one folder
        holding the repository's files as the hub lays them out, and the manifest."""
        return self.root / folder_slug(f"{repository_role(spec)}:{spec.strip()}")

    def folder(self, spec: str | ModelSpec) -> Path | None:
        """The store folder of an installed named model (encoder, generator or VLM), or None."""
        if isinstance(spec, str) and repository_role(spec) is not None:
            found = self.repository_folder(spec)
            return found if (found / MANIFEST_NAME).is_file() else None
        return super().folder(spec)

    def is_installed(self, spec: str | ModelSpec) -> bool:
        """True when `spec` loads without a network (generators and VLMs too)."""
        if isinstance(spec, str) and repository_role(spec) is not None:
            return self.folder(spec) is not None
        return super().is_installed(spec)

    def partial_bytes(self, spec: str) -> int:
        """Bytes of an interrupted download waiting to be resumed: for a generator or VLM, the
        files it finished (huggingface_hub keeps them; a file it had not finished restarts)."""
        if repository_role(spec) is not None:
            partial = self.root / PARTIAL_DIR / self.repository_folder(spec).name
            if not partial.is_dir():
                return 0
            return sum(p.stat().st_size for p in partial.rglob("*") if p.is_file())
        return super().partial_bytes(spec)

    # -- download ------------------------------------------------------------------------------

    def download(
        self,
        spec: str | ModelSpec,
        progress: ProgressCallback = no_progress,
        cancel: CancelToken | None = None,
    ) -> InstalledModel:
        """Download a named model into the store (already installed: returned as it is): an
        encoder, or the catalogue's generator or VLM (a whole repository, `engine.models.snapshots`).

        Progress counts bytes. A cancel raises `Cancelled` and keeps the partial file, which the
        next call resumes. Offline or unreachable -> `ModelUnavailableError` within seconds.
        """
        offer = offer_for(spec) if isinstance(spec, str) else None
        if offer is not None and offer.role != "encoder":
            existing = self.folder(offer.spec)
            if existing is not None:
                return installed_from(existing, read_manifest(existing / MANIFEST_NAME) or {})
            from engine.models.snapshots import fetch_repository  # imports huggingface_hub

            target = self.repository_folder(offer.spec)
            return fetch_repository(
                self, offer, target, self.endpoint, _hub_token(), progress, cancel
            )
        parsed = as_model_spec(spec)
        if parsed.kind == "demo":
            return self.installed()[0]
        key = store_key(parsed)
        existing = self.folder(parsed)
        if existing is not None:
            manifest = read_manifest(existing / MANIFEST_NAME) or {}
            return installed_from(existing, manifest)
        ensure_reachable(key, self.endpoint)
        plan = self._plan(parsed)
        partial = self.root / PARTIAL_DIR / folder_slug(key)
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
            _loaded_key(parsed, key),
            config,
            weights_part,
            convert=not origin_name.endswith(".safetensors"),
            origin="download",
            licence=licence_of(key),
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
        opened = self._open_resumed(url, have, key)
        if opened is None:
            return  # nothing left to fetch: the partial file is whole
        response, expected = opened
        with response:
            start = _resume_start(response, have, part, key)
            length = int(response.headers.get("Content-Length") or 0)
            total = start + length if length else 0
            self._copy_body(response, part, start, total, key, progress, cancel)
        _check_fetched(url, part, key, total, expected)

    def _open_resumed(self, url: str, have: int, key: str) -> tuple[Any, str | None] | None:
        """The answer to a request for `url` from byte `have` on, and the sha256 the hub
        vouches for; None when the server says nothing is left (416 on a resume). A missing
        or forbidden file raises `_Missing`; any other failure a one-line `unavailable`."""
        headers = dict(HEADERS)
        if have:
            headers["Range"] = f"bytes={have}-"
        token = _hub_token()
        if token and _origin(url) == _origin(self.endpoint):
            headers["Authorization"] = f"Bearer {token}"  # only to the hub, never elsewhere
        try:
            return _open(url, headers, self.timeout_seconds)
        except urllib.error.HTTPError as error:
            if error.code == 416 and have:
                return None
            if error.code in (401, 403, 404):
                raise _Missing() from None
            raise unavailable(key, f"the server answered HTTP {error.code}") from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise unavailable(key, one_line(reason)) from None

    def _copy_body(
        self,
        response: Any,
        part: Path,
        start: int,
        total: int,
        key: str,
        progress: ProgressCallback,
        cancel: CancelToken | None,
    ) -> None:
        """The answer's bytes into `part` from byte `start` on, chunk by chunk, with progress
        and cancel between chunks."""
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
                    raise unavailable(key, f"the download broke off: {one_line(error)}") from None
                if not chunk:
                    break
                handle.write(chunk)
                done += len(chunk)
                self.bytes_fetched += len(chunk)
                progress(meter.update(done, key))  # per chunk: views throttle their own

    # -- installing ----------------------------------------------------------------------------

    def _install(
        self,
        key: str,
        model_key: str,
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
                "model_key": model_key,
                "sha256": file_sha256(target),
                "size_bytes": target.stat().st_size,
                "licence": licence,
                "source": source,
                "origin": origin,
                "installed": datetime.now(UTC).isoformat(timespec="seconds"),
            }
            (temp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
            folder = self._place(temp, self.root / folder_slug(key))
        return installed_from(folder, manifest)


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


def _loaded_key(parsed: ModelSpec, key: str) -> str:
    """The key `load_encoder` gives a downloaded model: an ARCH:TAG trained otherwise than its
    architecture builds (QuickGELU) says so, as its vectors differ from the plain build's."""
    if parsed.kind == "hf-hub" or parsed.arch is None or parsed.pretrained is None:
        return key
    from engine.models.trained_as import for_tag

    return key + for_tag(parsed.arch, parsed.pretrained).note


def _range_start(response: Any) -> int | None:
    """The first byte a 206 answer holds, from its Content-Range (None: not said)."""
    found = str(response.headers.get("Content-Range") or "").strip()
    if not found.startswith("bytes "):
        return None
    first = found.removeprefix("bytes ").split("-", 1)[0]
    return int(first) if first.isdigit() else None


def _resume_start(response: Any, have: int, part: Path, key: str) -> int:
    """Where the answer's bytes go in `part`: after the `have` bytes already there when the
    server resumed there, else from the start (it sent the whole file). A resume from any
    other offset is never spliced in: the partial file goes, in one line."""
    if response.status != 206:
        return 0
    if _range_start(response) == have:
        return have
    if _range_start(response) != 0:  # bytes from elsewhere: never spliced in
        part.unlink(missing_ok=True)
        raise unavailable(key, "the server resumed the download at the wrong place (run it again)")
    return 0  # the whole file after all: written from its start


def _check_fetched(url: str, part: Path, key: str, total: int, expected: str | None) -> None:
    """A finished download checked: its full size, the sha256 the hub vouched for, else (for
    safetensors weights) a whole file by its own shape; a damaged one is removed."""
    if total and part.stat().st_size != total:
        raise unavailable(key, "the download broke off (run it again to resume)")
    if expected and file_sha256(part) != expected:
        part.unlink(missing_ok=True)
        raise ModelLoadError(
            f"the download of {key} was damaged (its sha256 does not match); run it again"
        )
    if not expected and url.endswith(".safetensors") and not whole_safetensors(part):
        # No sha256 from the server to check it against: the file's own shape must hold.
        part.unlink(missing_ok=True)
        raise ModelLoadError(
            f"the download of {key} is not a whole safetensors file (cut short or "
            "damaged on the way); run it again"
        )
