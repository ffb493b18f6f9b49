"""The model store: catalogue, downloads (progress, cancel, resume), offline fast failure,
offline packs, and models loading from the store under the same model key as a download.

No network: a local HTTP server (with Range support) plays the model hub.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import shutil
import socket
import threading
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from engine.errors import BadInputError, Cancelled
from engine.models.encoders import load_encoder, parse_model_spec
from engine.models.folders import CONFIG_NAME, MANIFEST_NAME, WEIGHTS_NAME
from engine.models.hub import ModelUnavailableError
from engine.models.offers import model_offers
from engine.models.store import ModelStore
from engine.progress import CancelToken, Progress
from tests.test_encoders import TINY_ARCH, TINY_CONFIG

HUB_ID = "quadrat/tiny-clip"
HUB_SPEC = f"hf-hub:{HUB_ID}"


# --- a local model hub -------------------------------------------------------------------------


@dataclass
class Hub:
    """A local HTTP server serving files by path, counting the body bytes it sends."""

    files: dict[str, bytes]
    url: str = ""
    sent: dict[str, int] = field(default_factory=dict)
    requests: list[tuple[str, str | None]] = field(default_factory=list)
    honour_range: bool = True


def _handler(hub: Hub) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # quiet test output
            pass

        def _head(self) -> bytes | None:
            path = self.path.split("?")[0]
            hub.requests.append((path, self.headers.get("Range")))
            body = hub.files.get(path)
            if body is None:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            start = 0
            wanted = self.headers.get("Range")
            if wanted and hub.honour_range:
                start = int(wanted.removeprefix("bytes=").split("-")[0])
                if start >= len(body):
                    self.send_response(416)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            else:
                self.send_response(200)
            self.send_header("Content-Length", str(len(body) - start))
            self.send_header("ETag", f'"{hashlib.sha256(body).hexdigest()}"')
            self.end_headers()
            return body[start:]

        def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
            self._head()

        def do_GET(self) -> None:  # noqa: N802
            body = self._head()
            if body:
                path = self.path.split("?")[0]
                for i in range(0, len(body), 16384):
                    self.wfile.write(body[i : i + 16384])
                    hub.sent[path] = hub.sent.get(path, 0) + len(body[i : i + 16384])

    return Handler


@pytest.fixture
def serve() -> Iterator:
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(files: dict[str, bytes], **options: object) -> Hub:
        hub = Hub(files, **options)  # type: ignore[arg-type]
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        hub.url = f"http://127.0.0.1:{server.server_address[1]}"
        return hub

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    """A local port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Path, bytes]:
    """A small random open_clip model: its safetensors file and bytes (~3.2 MB)."""
    import open_clip
    from safetensors.torch import save_file

    folder = tmp_path_factory.mktemp("tiny-model")
    config = folder / f"{TINY_ARCH}.json"
    config.write_text(json.dumps(TINY_CONFIG))
    open_clip.add_model_config(config)
    torch.manual_seed(2)
    model = open_clip.create_model(TINY_ARCH).eval()
    weights = folder / "tiny.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(weights))
    return weights, weights.read_bytes()


def hub_files(weights: bytes, preprocess: dict | None = None) -> dict[str, bytes]:
    config = {"model_cfg": TINY_CONFIG, "preprocess_cfg": preprocess or {}}
    base = f"/{HUB_ID}/resolve/main"
    return {
        f"{base}/{CONFIG_NAME}": json.dumps(config).encode(),
        f"{base}/{WEIGHTS_NAME}": weights,
    }


@pytest.fixture
def hub(serve, tiny) -> Hub:
    return serve(hub_files(tiny[1]))


WEIGHTS_URL = f"/{HUB_ID}/resolve/main/{WEIGHTS_NAME}"


def photos() -> list[Image.Image]:
    rng = np.random.default_rng(5)
    return [Image.fromarray(rng.integers(0, 256, (40, 56, 3), dtype=np.uint8)) for _ in range(3)]


def assert_same_encodings(a, b) -> None:
    texts = ["a heron at dusk", "lichen on bark"]
    np.testing.assert_array_equal(a.encode_texts(texts), b.encode_texts(texts))
    np.testing.assert_array_equal(a.encode_images(photos()), b.encode_images(photos()))


def one_line_way_on(message: str) -> None:
    assert "\n" not in message
    assert "--model demo" in message and "quadrat models import PACK" in message


# --- catalogue ---------------------------------------------------------------------------------


def test_the_catalogue_offers_demo_first_then_real_checkpoints_with_sizes() -> None:
    offers = model_offers()
    specs = [offer.spec for offer in offers]
    assert specs[0] == "demo" and offers[0].download_bytes == 0
    for wanted in ("ViT-B-32:", "ViT-L-14:", "hf-hub:imageomics/bioclip", "ViT-H-14-378"):
        assert any(spec.startswith(wanted) for spec in specs), wanted
    for offer in offers:
        parse_model_spec(offer.spec)  # every entry is a valid spec
        assert offer.memory_bytes > offer.download_bytes
        assert offer.good_at and offer.licence and offer.source and offer.label
    vit_b = next(o for o in offers if o.spec == "ViT-B-32:laion2b_s34b_b79k")
    assert 600e6 < vit_b.download_bytes < 610e6  # the published file: 605 MB


# --- downloads ---------------------------------------------------------------------------------


def test_a_download_reports_bytes_and_installs_config_weights_and_manifest(
    tmp_path, hub, tiny
) -> None:
    store = ModelStore(tmp_path / "store", endpoint=hub.url)
    assert not store.is_installed(HUB_SPEC)
    reports: list[Progress] = []
    installed = store.download(HUB_SPEC, progress=reports.append)

    size = len(tiny[1])
    assert reports[-1].done == reports[-1].total == size
    assert [r.done for r in reports] == sorted(r.done for r in reports)
    assert installed.spec == HUB_SPEC and installed.origin == "download"
    assert installed.size_bytes == size and installed.path is not None
    assert (installed.path / WEIGHTS_NAME).read_bytes() == tiny[1]
    manifest = json.loads((installed.path / MANIFEST_NAME).read_text())
    assert manifest["sha256"] == hashlib.sha256(tiny[1]).hexdigest()
    assert manifest["source"] == HUB_ID and manifest["licence"]
    assert store.is_installed(HUB_SPEC)
    assert HUB_SPEC in [m.spec for m in store.installed()]
    assert store.installed()[0].spec == "demo"


def test_a_cancelled_download_keeps_its_partial_file_and_resumes_with_fewer_bytes(
    tmp_path, hub, tiny
) -> None:
    store = ModelStore(tmp_path / "store", endpoint=hub.url)
    store.chunk_bytes = 64 * 1024
    size = len(tiny[1])
    cancel = CancelToken()

    def stop_at_a_third(p: Progress) -> None:
        if p.done >= size // 3:
            cancel.cancel()

    with pytest.raises(Cancelled):
        store.download(HUB_SPEC, progress=stop_at_a_third, cancel=cancel)
    kept = store.partial_bytes(HUB_SPEC)
    assert size // 3 <= kept < size
    assert not store.is_installed(HUB_SPEC)
    first = store.bytes_fetched
    assert first >= kept

    reports: list[Progress] = []
    installed = store.download(HUB_SPEC, progress=reports.append)
    assert installed.path is not None
    assert (installed.path / WEIGHTS_NAME).read_bytes() == tiny[1]
    second = store.bytes_fetched - first
    assert second == size - kept + len(hub.files[f"/{HUB_ID}/resolve/main/{CONFIG_NAME}"])
    assert second < size  # only the missing part of the weights travelled again
    assert (WEIGHTS_URL, f"bytes={kept}-") in hub.requests
    assert reports[0].done == kept and reports[-1].done == size
    assert store.partial_bytes(HUB_SPEC) == 0


def test_a_server_that_ignores_range_gets_the_file_whole_again(tmp_path, serve, tiny) -> None:
    hub = serve(hub_files(tiny[1]), honour_range=False)
    store = ModelStore(tmp_path / "store", endpoint=hub.url)
    store.chunk_bytes = 64 * 1024
    cancel = CancelToken()

    def stop_after_a_chunk(p: Progress) -> None:
        if p.done:
            cancel.cancel()

    with pytest.raises(Cancelled):
        store.download(HUB_SPEC, progress=stop_after_a_chunk, cancel=cancel)
    kept = store.partial_bytes(HUB_SPEC)
    assert kept > 0
    installed = store.download(HUB_SPEC)
    assert installed.path is not None
    assert (installed.path / WEIGHTS_NAME).read_bytes() == tiny[1]
    assert (WEIGHTS_URL, f"bytes={kept}-") in hub.requests
    assert hub.sent[WEIGHTS_URL] >= kept + len(tiny[1])  # the whole file came again


def test_offline_a_download_fails_within_seconds_in_one_line(tmp_path, serve, tiny, monkeypatch):
    store = ModelStore(tmp_path / "store", endpoint=f"http://127.0.0.1:{closed_port()}")
    started = time.monotonic()
    with pytest.raises(ModelUnavailableError) as caught:
        store.download(HUB_SPEC)
    assert time.monotonic() - started < 5
    one_line_way_on(str(caught.value))
    assert str(caught.value).startswith(f"could not download {HUB_SPEC}: 127.0.0.1:")

    # HF_HUB_OFFLINE: not even a probe goes out, although the hub is up.
    hub = serve(hub_files(tiny[1]))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelUnavailableError, match="HF_HUB_OFFLINE"):
        ModelStore(tmp_path / "store", endpoint=hub.url).download(HUB_SPEC)
    assert hub.requests == []


def test_load_encoder_of_a_model_not_on_disk_fails_fast_when_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    for spec in ("hf-hub:quadrat/not-here", "ViT-B-32:laion2b_s34b_b79k"):
        started = time.monotonic()
        with pytest.raises(ModelUnavailableError) as caught:
            load_encoder(
                spec, device="cpu", cache_dir=tmp_path / "cache", store_dir=tmp_path / "store"
            )
        assert time.monotonic() - started < 5, spec
        one_line_way_on(str(caught.value))


# --- loading from the store ------------------------------------------------------------------


def test_a_downloaded_hub_model_loads_offline_under_its_hub_key(tmp_path, hub, tiny, monkeypatch):
    store = ModelStore(tmp_path / "store", endpoint=hub.url)
    store.download(HUB_SPEC)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    from_store = load_encoder(
        HUB_SPEC, device="cpu", cache_dir=tmp_path / "empty-cache", store_dir=store.root
    )
    assert from_store.model_key == HUB_SPEC  # as a direct hf-hub load names it
    assert_same_encodings(from_store, load_encoder(f"{TINY_ARCH}:{tiny[0]}", device="cpu"))


def test_a_pretrained_tag_from_the_store_encodes_as_open_clips_own_load(
    tmp_path, serve, tiny, monkeypatch
) -> None:
    """ARCH:TAG from the store builds the config open_clip would (architecture + the tag's
    preprocessing, here a non-default mean and std) and keeps the key ARCH:TAG."""
    import huggingface_hub.constants
    from open_clip import pretrained

    tag_cfg = {"hf_hub": f"{HUB_ID}/", "mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)}
    monkeypatch.setitem(pretrained._PRETRAINED, TINY_ARCH, {"tiny": tag_cfg})
    spec = f"{TINY_ARCH}:tiny"
    hub = serve(hub_files(tiny[1]))
    store = ModelStore(tmp_path / "store", endpoint=hub.url)
    store.download(spec)

    # open_clip's own load of the tag, from its download cache laid out by hand
    cache = tmp_path / "cache"
    repo = cache / "models--quadrat--tiny-clip"
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(snapshot.name)
    (snapshot / WEIGHTS_NAME).write_bytes(tiny[1])
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    direct = load_encoder(spec, device="cpu", cache_dir=cache)

    from_store = load_encoder(spec, device="cpu", cache_dir=tmp_path / "none", store_dir=store.root)
    assert from_store.model_key == direct.model_key == spec
    assert_same_encodings(from_store, direct)
    # the tag's normalisation was kept (the default would encode differently)
    assert from_store._transform.transforms[-1].mean == [0.5, 0.5, 0.5]


def test_a_downloaded_quick_gelu_tag_is_listed_under_the_key_it_loads_with(
    tmp_path, serve, tiny, monkeypatch
) -> None:
    """A tag trained with QuickGELU on an architecture that builds GELU: the store lists it
    under the key the loader gives it (" [quickgelu]"), not the bare spec, so the list and a
    library indexed with it name the same model."""
    from open_clip import pretrained

    tag_cfg = {"hf_hub": f"{HUB_ID}/", "quick_gelu": True}
    monkeypatch.setitem(pretrained._PRETRAINED, TINY_ARCH, {"tiny": tag_cfg})
    spec = f"{TINY_ARCH}:tiny"
    hub = serve(hub_files(tiny[1]))
    store = ModelStore(tmp_path / "store", endpoint=hub.url)
    installed = store.download(spec)

    loaded = load_encoder(spec, device="cpu", cache_dir=tmp_path / "none", store_dir=store.root)
    assert loaded.model_key == f"{spec} [quickgelu]"
    assert installed.model_key == loaded.model_key
    assert [m.model_key for m in store.installed() if m.spec == spec] == [loaded.model_key]


# --- offline packs ---------------------------------------------------------------------------


def test_pack_then_import_on_another_machine_round_trips(tmp_path, hub, tiny, monkeypatch):
    connected = ModelStore(tmp_path / "connected", endpoint=hub.url)
    pack = connected.pack(HUB_SPEC, tmp_path)  # downloads first, then writes one archive
    assert pack.parent == tmp_path and pack.is_file()
    # Readable by the colleague it is carried to, not private like a temporary file.
    assert pack.stat().st_mode & 0o777 == 0o644
    with zipfile.ZipFile(pack) as archive:
        manifest = json.loads(archive.read(MANIFEST_NAME))
        assert sorted(archive.namelist()) == sorted([MANIFEST_NAME, CONFIG_NAME, WEIGHTS_NAME])
    assert manifest["spec"] == HUB_SPEC and manifest["source"] == HUB_ID and manifest["licence"]
    assert manifest["files"][WEIGHTS_NAME]["sha256"] == hashlib.sha256(tiny[1]).hexdigest()

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    offline = ModelStore(tmp_path / "offline")
    reports: list[Progress] = []
    installed = offline.import_pack(pack, progress=reports.append)
    assert installed.spec == HUB_SPEC and installed.origin == "pack"
    assert reports[-1].done == reports[-1].total > len(tiny[1])
    assert offline.is_installed(HUB_SPEC)
    encoder = load_encoder(HUB_SPEC, device="cpu", cache_dir=tmp_path / "c", store_dir=offline.root)
    # A pack vouches only for itself: its vectors are kept apart from the published model's.
    digest = hashlib.sha256(tiny[1]).hexdigest()
    assert encoder.model_key == f"{HUB_SPEC} [pack sha256-{digest[:16]}]"
    assert_same_encodings(encoder, load_encoder(f"{TINY_ARCH}:{tiny[0]}", device="cpu"))

    offline.remove(HUB_SPEC)
    assert not offline.is_installed(HUB_SPEC)
    assert [m.spec for m in offline.installed()] == ["demo"]


def _rewrite(pack: Path, out: Path, change) -> Path:
    with zipfile.ZipFile(pack) as src, zipfile.ZipFile(out, "w") as dst:
        for name in src.namelist():
            dst.writestr(name, change(name, src.read(name)))
    return out


def test_a_tampered_or_foreign_pack_is_refused_and_installs_nothing(tmp_path, hub) -> None:
    pack = ModelStore(tmp_path / "connected", endpoint=hub.url).pack(HUB_SPEC, tmp_path / "m.zip")

    def flip_a_weight(name: str, data: bytes) -> bytes:
        if name != WEIGHTS_NAME:
            return data
        middle = len(data) // 2
        return data[:middle] + bytes([data[middle] ^ 1]) + data[middle + 1 :]

    tampered = _rewrite(pack, tmp_path / "tampered.zip", flip_a_weight)
    no_manifest = _rewrite(
        pack, tmp_path / "bare.zip", lambda n, d: d if n != MANIFEST_NAME else b"{}"
    )
    not_a_zip = tmp_path / "photo.qmodel"
    not_a_zip.write_bytes(b"\xff\xd8\xff\xe0 not an archive")
    store = ModelStore(tmp_path / "offline")
    for bad, reason in [
        (tampered, "fails its sha256 check"),
        (no_manifest, "not a Quadrat model pack"),
        (not_a_zip, "not a readable model pack"),
        (tmp_path / "missing.zip", "model pack not found"),
    ]:
        with pytest.raises(BadInputError, match=reason) as caught:
            store.import_pack(bad)
        assert "\n" not in str(caught.value)
        assert not store.is_installed(HUB_SPEC)
        left = list(store.root.iterdir()) if store.root.exists() else []
        assert left == [], left  # no half-installed folder, no temporary folder


def test_a_picked_checkpoint_file_is_copied_in_and_keeps_its_model_key(tmp_path, tiny) -> None:
    store = ModelStore(tmp_path / "store")
    original = tmp_path / "picked" / "my-clip.safetensors"
    original.parent.mkdir()
    shutil.copy(tiny[0], original)
    installed = store.import_file(f"{TINY_ARCH}:{original}")
    assert installed.origin == "file" and installed.path is not None
    original.unlink()  # the store's copy does not depend on the picked file
    from_store = load_encoder(installed.spec, device="cpu")
    direct = load_encoder(f"{TINY_ARCH}:{tiny[0]}", device="cpu")
    assert from_store.model_key == direct.model_key
    assert_same_encodings(from_store, direct)
    with pytest.raises(BadInputError, match="which architecture"):
        store.import_file(str(tiny[0]))


def test_the_demo_model_is_always_installed_and_cannot_be_removed(tmp_path) -> None:
    store = ModelStore(tmp_path / "store")
    assert store.is_installed("demo")
    assert not store.is_installed("ViT-B-32:laion2b_s34b_b79k")
    with pytest.raises(BadInputError, match="bundled"):
        store.remove("demo")
    with pytest.raises(BadInputError, match="is not installed"):
        store.remove("ViT-B-32:laion2b_s34b_b79k")
