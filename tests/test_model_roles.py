"""The model store for the three roles a search needs (encoders, image generators, VLM scorers),
and download integrity against a stand-in hub (no real network)."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from engine.errors import ModelLoadError
from tests.gui.conftest import make_app  # noqa: F401 - the window's fixture

CONFIG = json.dumps({"model_cfg": {"embed_dim": 8}, "preprocess_cfg": {}}).encode()
WEIGHTS = b"not really safetensors, but bytes whose sha256 the hub publishes" * 512


@dataclass
class StandIn:
    """A local stand-in for the hub: `files` by URL path; `redirect` sends a file to a CDN path
    with the hub's X-Linked-Etag on the redirect; `cdn` is what the CDN serves and its ETag."""

    files: dict[str, bytes]
    redirect: dict[str, tuple[str, str]] = field(default_factory=dict)  # path -> (cdn, linked)
    cdn: dict[str, tuple[bytes, str]] = field(default_factory=dict)  # path -> (body, etag)
    commit: str = "a" * 40
    api: dict[str, object] = field(default_factory=dict)  # path -> JSON answer
    requests: list[str] = field(default_factory=list)
    ranges: list[str] = field(default_factory=list)
    url: str = ""
    damage: set[str] = field(default_factory=set)  # paths whose GET body is altered


def _handler(hub: StandIn) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _answer(self, send_body: bool) -> None:
            path = self.path.split("?", 1)[0]
            hub.requests.append(f"{self.command} {path}")
            if self.headers.get("Range"):
                hub.ranges.append(f"{path} {self.headers['Range']}")
            if path in hub.api:
                data = json.dumps(hub.api[path]).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if send_body:
                    self.wfile.write(data)
                return
            if path in hub.redirect:
                target, linked = hub.redirect[path]
                self.send_response(302)
                self.send_header("Location", f"{hub.url}{target}")
                self.send_header("X-Linked-Etag", f'"{linked}"')
                self.send_header("ETag", '"0123456789abcdef0123456789abcdef01234567"')
                self.send_header("X-Repo-Commit", hub.commit)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if path in hub.cdn:
                body, etag = hub.cdn[path]
            elif path in hub.files:
                body = hub.files[path]
                etag = hashlib.sha256(body).hexdigest()
            else:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            start = 0
            ranged = self.headers.get("Range", "")
            if ranged.startswith("bytes="):
                start = int(ranged.removeprefix("bytes=").split("-", 1)[0] or 0)
                if start >= len(body):
                    self.send_response(416)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
            self.send_response(206 if start else 200)
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            self.send_header("Content-Length", str(len(body) - start))
            self.send_header("ETag", f'"{etag}"')
            self.send_header("X-Repo-Commit", hub.commit)
            self.end_headers()
            if send_body:
                sent = body[start:]
                if path in hub.damage:
                    sent = bytes([sent[0] ^ 0xFF]) + sent[1:]
                self.wfile.write(sent)

        def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
            self._answer(send_body=False)

        def do_GET(self) -> None:  # noqa: N802
            self._answer(send_body=True)

    return Handler


@pytest.fixture
def stand_in() -> Iterator:
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(hub: StandIn) -> StandIn:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        hub.url = f"http://127.0.0.1:{server.server_address[1]}"
        return hub

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _redirecting_hub(body: bytes, cdn_etag: str) -> StandIn:
    """A hub that sends the weights to a CDN: the file's sha256 (of WEIGHTS) on the redirect
    as X-Linked-Etag, the CDN answering `body` under its own ETag."""
    base = "/org/tiny/resolve/main"
    return StandIn(
        files={f"{base}/open_clip_config.json": CONFIG},
        redirect={
            f"{base}/open_clip_model.safetensors": (
                "/cdn/blob",
                hashlib.sha256(WEIGHTS).hexdigest(),
            )
        },
        cdn={"/cdn/blob": (body, cdn_etag)},
    )


# -- item 10: the sha256 is the hub's X-Linked-Etag on the redirect, not the CDN's ETag -----------


def test_a_redirected_download_is_checked_against_the_redirects_linked_etag(
    tmp_path: Path, stand_in
) -> None:
    # The CDN's own ETag is a 64-hex value that is not the file's sha256 (an S3 multipart or
    # re-encoded tag looks like this): trusting it refuses a good download.
    other = hashlib.sha256(b"something else").hexdigest()
    hub = stand_in(_redirecting_hub(WEIGHTS, other))
    from engine.models.store import ModelStore

    model = ModelStore(tmp_path / "store", endpoint=hub.url).download("hf-hub:org/tiny")
    assert model.path is not None
    manifest = json.loads((model.path / "manifest.json").read_text())
    assert manifest["sha256"] == hashlib.sha256(WEIGHTS).hexdigest()
    assert "GET /cdn/blob" in hub.requests  # it did follow the redirect


def test_a_damaged_redirected_download_is_refused_and_installs_nothing(
    tmp_path: Path, stand_in
) -> None:
    # The CDN hands out other bytes under an md5-like ETag: only the redirect's X-Linked-Etag
    # can tell, and it must.
    damaged = bytearray(WEIGHTS)
    damaged[100] ^= 0xFF
    hub = stand_in(_redirecting_hub(bytes(damaged), "d41d8cd98f00b204e9800998ecf8427e"))
    from engine.models.store import ModelStore

    store = ModelStore(tmp_path / "store", endpoint=hub.url)
    with pytest.raises(ModelLoadError, match="damaged"):
        store.download("hf-hub:org/tiny")
    assert not store.is_installed("hf-hub:org/tiny")


# -- item 12: one store for the three roles -------------------------------------------------------

VLM = "hf-hub:HuggingFaceTB/SmolVLM-256M-Instruct"
VLM_REPO = "HuggingFaceTB/SmolVLM-256M-Instruct"
BIG = bytes(range(256)) * (96 * 1024)  # 24 MiB: more than one of huggingface_hub's chunks


def _repository_hub(files: dict[str, bytes], repo: str = VLM_REPO) -> StandIn:
    """A stand-in that answers huggingface_hub's listing API and serves `files` of `repo`."""
    commit = "b" * 40
    tree = []
    for name, body in files.items():
        entry: dict[str, object] = {
            "type": "file",
            "oid": hashlib.sha1(body).hexdigest(),
            "size": len(body),
            "path": name,
        }
        if name.endswith(".safetensors"):
            entry["lfs"] = {
                "oid": hashlib.sha256(body).hexdigest(),
                "size": len(body),
                "pointerSize": 134,
            }
        tree.append(entry)
    served: dict[str, bytes] = {}
    cdn: dict[str, tuple[bytes, str]] = {}
    for name, body in files.items():
        for revision in ("main", commit):
            served[f"/{repo}/resolve/{revision}/{name}"] = body
    hub = StandIn(files=served, cdn=cdn, commit=commit)
    hub.api = {
        f"/api/models/{repo}/revision/main": {"id": repo, "sha": commit, "siblings": []},
        f"/api/models/{repo}/tree/{commit}": tree,
    }
    return hub


def _vlm_files() -> dict[str, bytes]:
    return {
        "config.json": json.dumps({"model_type": "idefics3"}).encode(),
        "tokenizer.json": b"{}",
        "model.safetensors": BIG,
        "onnx/model.onnx": b"not wanted",
        "README.md": b"# card",
    }


def test_every_offer_has_a_role_and_each_role_is_offered(capsys) -> None:
    from app.cli import main

    assert main(["models", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    offered = [row for row in rows if row["download_bytes"] is not None]
    assert {row["role"] for row in offered} == {"encoder", "generator", "vlm"}
    for row in offered:
        assert row["licence"] and row["good_at"] and row["memory_bytes"] > 0
        if row["role"] != "encoder":
            assert row["download_bytes"] > 100_000_000
            assert row["installed"] is False and row["use"] is None


def test_a_vlm_downloads_as_a_whole_folder_with_byte_progress(
    tmp_path: Path, stand_in, monkeypatch
) -> None:
    hub = stand_in(_repository_hub(_vlm_files()))
    from engine.models.store import ModelStore

    seen: list[int] = []
    store = ModelStore(tmp_path / "store", endpoint=hub.url)
    model = store.download(VLM, progress=lambda p: seen.append(p.done))
    assert model.role == "vlm" and model.path is not None
    assert (model.path / "model.safetensors").read_bytes() == BIG
    assert (model.path / "config.json").is_file() and (model.path / "tokenizer.json").is_file()
    assert not (model.path / "onnx").exists() and not (model.path / "README.md").exists()
    assert not (model.path / ".cache").exists()
    assert max(seen) >= len(BIG)  # bytes, not files
    assert store.is_installed(VLM)
    manifest = json.loads((model.path / "manifest.json").read_text())
    assert manifest["role"] == "vlm"
    assert manifest["files"]["model.safetensors"]["sha256"] == hashlib.sha256(BIG).hexdigest()
    again = ModelStore(tmp_path / "store", endpoint=hub.url).download(VLM)
    assert again.path == model.path


def test_an_installed_vlm_is_listed_with_the_scorer_spec_that_uses_it(stand_in, capsys) -> None:
    from app import paths
    from app.cli import main
    from engine.models.store import ModelStore

    hub = stand_in(_repository_hub(_vlm_files()))
    model = ModelStore(paths.models_dir(), endpoint=hub.url).download(VLM)
    assert main(["models", "list", "--json", "--role", "vlm"]) == 0
    rows = {row["spec"]: row for row in json.loads(capsys.readouterr().out)}
    assert {row["role"] for row in rows.values()} == {"vlm"}
    assert rows[VLM]["installed"] and rows[VLM]["use"] == f"vlm:{model.path}"


def test_a_cancelled_repository_download_keeps_finished_files_and_fetches_only_the_rest(
    tmp_path: Path, stand_in, monkeypatch
) -> None:
    from engine.errors import Cancelled
    from engine.models import snapshots
    from engine.models.store import ModelStore
    from engine.progress import CancelToken

    monkeypatch.setattr(snapshots, "WORKERS", 1)  # one file after another: a known cut
    files = _vlm_files()
    del files["model.safetensors"]
    shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    for shard in shards:
        files[shard] = BIG
    hub = stand_in(_repository_hub(files))
    store = ModelStore(tmp_path / "store", endpoint=hub.url)
    cancel = CancelToken()

    def stop_inside_the_second_shard(p) -> None:
        if p.done >= len(BIG) + 1_000_000:
            cancel.cancel()

    with pytest.raises(Cancelled):
        store.download(VLM, progress=stop_inside_the_second_shard, cancel=cancel)
    assert not store.is_installed(VLM)
    assert store.partial_bytes(VLM) >= len(BIG)  # the finished shard is kept
    model = store.download(VLM)
    assert model.path is not None
    for shard in shards:
        assert (model.path / shard).read_bytes() == BIG
    gets = [r for r in hub.requests if r.startswith("GET") and "-of-00002" in r]
    assert len(gets) == 3  # one shard once, the interrupted one twice: not everything again
    assert store.partial_bytes(VLM) == 0


def test_a_damaged_repository_file_is_refused_against_the_hubs_sha256(
    tmp_path: Path, stand_in
) -> None:
    hub = _repository_hub(_vlm_files())
    hub.damage = {f"/{VLM_REPO}/resolve/{hub.commit}/model.safetensors"}
    hub = stand_in(hub)
    from engine.models.store import ModelStore

    store = ModelStore(tmp_path / "store", endpoint=hub.url)
    with pytest.raises(ModelLoadError, match=r"damaged \(model.safetensors"):
        store.download(VLM)
    assert not store.is_installed(VLM)
    assert not any(store.root.glob(".partial/*/model.safetensors"))  # fetched again next time


def test_a_gated_or_missing_repository_is_one_line(tmp_path: Path, stand_in) -> None:
    from engine.models.hub import ModelUnavailableError
    from engine.models.store import ModelStore

    hub = stand_in(StandIn(files={}))
    with pytest.raises(ModelUnavailableError) as raised:
        ModelStore(tmp_path / "store", endpoint=hub.url).download(VLM)
    assert "\n" not in str(raised.value) and VLM in str(raised.value)


def test_sizes_and_licences_not_checked_against_the_hub_are_shown_as_estimates(capsys) -> None:
    from app.cli import main

    assert main(["models", "list", "--json"]) == 0
    rows = {row["spec"]: row for row in json.loads(capsys.readouterr().out)}
    unchecked = {"hf-hub:stabilityai/sd-turbo", VLM, "hf-hub:google/paligemma2-3b-pt-224"}
    for spec, row in rows.items():
        assert row["size_verified"] is (spec not in unchecked), spec
        assert row["memory_estimate"] is True
    assert rows["hf-hub:stabilityai/sdxl-turbo"]["licence_verified"] is True
    assert rows[VLM]["licence_verified"] is True
    assert rows["hf-hub:Qwen/Qwen2.5-VL-3B-Instruct"]["licence_verified"] is False
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert "download ≈2.6 GB (estimate)" in out and "download ≈12.1 GB (estimate)" in out
    assert "download 6.9 GB\n" in out  # sdxl-turbo: the published figure, no mark
    assert "Licence: Qwen Research License (non-commercial) (not checked" in out


def test_a_download_replaces_the_estimate_with_what_the_hub_reports(stand_in, capsys) -> None:
    from app import paths
    from app.cli import main
    from engine.errors import Cancelled
    from engine.models.store import ModelStore
    from engine.progress import CancelToken

    files = _vlm_files()
    hub = stand_in(_repository_hub(files))
    wanted = sum(
        len(body) for name, body in files.items() if name not in ("onnx/model.onnx", "README.md")
    )
    cancel = CancelToken()
    cancel.cancel()  # at the first byte: the listing has been read, nothing downloaded yet
    with pytest.raises(Cancelled):
        ModelStore(paths.models_dir(), endpoint=hub.url).download(VLM, cancel=cancel)
    assert main(["models", "list", "--json", "--role", "vlm"]) == 0
    row = {r["spec"]: r for r in json.loads(capsys.readouterr().out)}[VLM]
    assert row["installed"] is False
    assert row["download_bytes"] == row["size_bytes"] == wanted and row["size_verified"] is True
    assert main(["models", "list", "--role", "vlm"]) == 0
    out = capsys.readouterr().out
    line = next(text for text in out.splitlines() if text.startswith(VLM))
    assert "≈" not in line and "estimate" not in line and "25.2 MB" in line
    ModelStore(paths.models_dir(), endpoint=hub.url).download(VLM)
    assert main(["models", "list", "--json", "--role", "vlm"]) == 0
    row = {r["spec"]: r for r in json.loads(capsys.readouterr().out)}[VLM]
    assert row["installed"] and row["size_verified"] is True
    assert row["download_bytes"] == row["size_bytes"] == wanted


def test_a_downloaded_generator_can_be_removed(tmp_path: Path, stand_in) -> None:
    repo = "stabilityai/sd-turbo"
    files = {
        "model_index.json": b"{}",
        "unet/config.json": b"{}",
        "unet/diffusion_pytorch_model.fp16.safetensors": b"u" * 1000,
        "unet/diffusion_pytorch_model.safetensors": b"U" * 2000,  # fp32: not fetched
        "scheduler/scheduler_config.json": b"{}",
        "tokenizer/vocab.json": b"{}",
    }
    hub = stand_in(_repository_hub(files, repo))
    from engine.models.store import ModelStore

    store = ModelStore(tmp_path / "store", endpoint=hub.url)
    model = store.download(f"hf-hub:{repo}")
    assert model.role == "generator" and model.path is not None
    assert (model.path / "unet" / "diffusion_pytorch_model.fp16.safetensors").is_file()
    assert not (model.path / "unet" / "diffusion_pytorch_model.safetensors").exists()
    store.remove(f"hf-hub:{repo}")
    assert not store.is_installed(f"hf-hub:{repo}")


# -- the window: a chooser tab per role --------------------------------------------------------------

GENERATOR_REPO = "stabilityai/sd-turbo"


def _generator_files() -> dict[str, bytes]:
    return {
        "model_index.json": b"{}",
        "unet/config.json": b"{}",
        "unet/diffusion_pytorch_model.fp16.safetensors": b"u" * 1000,
        "scheduler/scheduler_config.json": b"{}",
    }


def _two_repository_hub() -> StandIn:
    hub = _repository_hub(_vlm_files())
    other = _repository_hub(_generator_files(), GENERATOR_REPO)
    hub.files.update(other.files)
    hub.api.update(other.api)
    return hub


@pytest.mark.qt_log_ignore("does not support propagateSizeHints", "does not support raise")
def test_a_method_needing_a_vlm_or_generator_opens_the_chooser_on_that_role(
    qtbot,
    make_app,  # noqa: F811 - pytest fixtures
    tmp_path: Path,
    stand_in,
) -> None:
    from app.settings import Settings
    from engine.models.store import ModelStore

    hub = stand_in(_two_repository_hub())
    store = ModelStore(tmp_path / "models", endpoint=hub.url)
    settings = Settings(model="demo", library_dir=str(tmp_path / "library"), batch_size=16)
    app = make_app(settings=settings, model_store=store)
    qtbot.waitUntil(lambda: app.session.library is not None, timeout=20_000)

    chooser = app.models.open_for_role("vlm", "Reranked needs a vision-language model.")
    assert chooser.isVisible() and chooser.role() == "vlm"
    assert {row.role for row in chooser.rows()} == {"vlm"} and len(chooser.rows()) >= 3
    assert not chooser.demo_button.isEnabled()  # the demo model is a search model
    chooser.select(VLM)
    with qtbot.waitSignal(app.models.roleModelChosen, timeout=20_000) as chosen:
        chooser.use_button.click()
    role, use = chosen.args
    folder = store.folder(VLM)
    assert role == "vlm" and folder is not None and use == f"vlm:{folder}"
    assert next(r for r in chooser.rows() if r.spec == VLM).installed
    assert f"use it as vlm:{folder}" in chooser.status.text()
    assert app.settings.model == "demo"  # the search model is untouched

    chooser = app.models.open_for_role("generator", "VisRet needs an image generator.")
    assert chooser.role() == "generator"
    chooser.select(f"hf-hub:{GENERATOR_REPO}")
    with qtbot.waitSignal(app.models.roleModelChosen, timeout=20_000):
        chooser.use_button.click()
    generator = store.folder(f"hf-hub:{GENERATOR_REPO}")
    assert generator is not None and app.settings.generator == str(generator)

    chooser.set_role("encoder")  # the search models' tab holds search models only
    assert {row.role for row in chooser.rows()} == {"encoder"}
    assert chooser.demo_button.isEnabled()


@pytest.mark.qt_log_ignore("does not support propagateSizeHints", "does not support raise")
def test_visret_without_a_generator_on_real_photos_opens_the_chooser_on_generators(
    qtbot,
    make_app,  # noqa: F811 - pytest fixtures
    tmp_path: Path,
    monkeypatch,
) -> None:
    from app.controllers.search import SearchRequest
    from app.settings import Settings
    from engine.models.store import ModelStore

    store = ModelStore(tmp_path / "models", endpoint="http://127.0.0.1:9")
    settings = Settings(model="demo", library_dir=str(tmp_path / "library"), batch_size=16)
    app = make_app(settings=settings, model_store=store)
    qtbot.waitUntil(lambda: app.session.library is not None, timeout=20_000)
    library = app.session.library
    # A library of real photos, indexed with a real CLIP model (the demo painter is only for
    # the demo library).
    monkeypatch.setattr(
        type(library), "model_key", property(lambda self: "ViT-B-32:laion2b_s34b_b79k")
    )
    started: list[object] = []
    app.search.searchStarted.connect(lambda *args: started.append(args))
    with qtbot.waitSignal(app.search.modelNeeded, timeout=5_000) as needed:
        app.search.search(SearchRequest("a heron in reeds", method="visret"))
    assert needed.args[0] == "generator" and "image generator" in needed.args[1]
    chooser = app.models.chooser
    assert chooser is not None and chooser.isVisible() and chooser.role() == "generator"
    assert "image generator" in chooser.reason.text()
    assert not started  # nothing ran that would fail later

    # With a generator set, the same search is not stopped for a missing model.
    from dataclasses import replace

    from engine.methods.registry import spec_from_params

    monkeypatch.setattr(
        app.session, "settings", replace(app.session.settings, generator="demo-painter")
    )
    assert app.search._missing_model(spec_from_params("visret", {})) is None
