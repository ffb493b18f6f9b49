"""Hostile model packs: a pack that names a published model but holds other weights, zip
bombs, links and paths inside the archive, broken manifests, imports killed half way, and a
hub token that must not follow a redirect to another host."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from app.cli import main
from engine.errors import BadInputError
from engine.models.encoders import load_encoder
from engine.models.folders import CONFIG_NAME, MANIFEST_NAME, WEIGHTS_NAME
from engine.models.packs import PACK_FORMAT
from engine.models.store import ModelStore
from engine.progress import Progress
from tests.test_encoders import TINY_ARCH, TINY_CONFIG
from tests.test_models import HUB_SPEC, hub, hub_files, serve, tiny  # noqa: F401

PUBLISHED = "ViT-B-32:laion2b_s34b_b79k"


def _weights(seed: int) -> bytes:
    import open_clip
    from safetensors.torch import save

    torch.manual_seed(seed)
    model = open_clip.create_model(TINY_ARCH)
    return save({k: v.contiguous() for k, v in model.state_dict().items()})


@pytest.fixture(scope="module")
def other_weights(tiny) -> bytes:  # noqa: F811 - `tiny` registers the architecture
    """Random weights of the tiny architecture, unlike the hub's."""
    return _weights(seed=7)


def make_pack(
    path: Path,
    spec: str,
    weights: bytes,
    *,
    config: dict | None = None,
    manifest: dict | None = None,
    entries: Callable[[zipfile.ZipFile, dict[str, bytes]], None] | None = None,
) -> Path:
    """A pack as `quadrat models pack` writes it, with parts replaced."""
    files = {
        CONFIG_NAME: json.dumps(
            config or {"model_cfg": TINY_CONFIG, "preprocess_cfg": {}}
        ).encode(),
        WEIGHTS_NAME: weights,
    }
    content = {
        "format": PACK_FORMAT,
        "version": 1,
        "spec": spec,
        "model_key": spec,
        "licence": "MIT",
        "source": "somewhere",
        "files": {
            name: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
            for name, data in files.items()
        },
    }
    content.update(manifest or {})
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(MANIFEST_NAME, json.dumps(content))
        if entries is not None:
            entries(archive, files)
        else:
            for name, data in files.items():
                archive.writestr(name, data)
    return path


def nothing_left(store: ModelStore) -> None:
    left = list(store.root.iterdir()) if store.root.exists() else []
    assert left == [], left  # no model folder, no temporary folder, no lock file


def refused(store: ModelStore, pack: Path, *phrases: str) -> str:
    with pytest.raises(BadInputError) as caught:
        store.import_pack(pack)
    message = str(caught.value)
    assert "\n" not in message and "nothing was installed" in message
    for phrase in phrases:
        assert phrase in message, message
    return message


def photos() -> list[Image.Image]:
    rng = np.random.default_rng(3)
    return [Image.fromarray(rng.integers(0, 255, (40, 40, 3), dtype=np.uint8)) for _ in range(3)]


# --- a pack that names a published model ------------------------------------------------------


def test_a_small_random_pack_labelled_as_a_published_model_is_refused(tmp_path, tiny) -> None:  # noqa: F811
    import open_clip

    store = ModelStore(tmp_path / "store")
    labelled = make_pack(tmp_path / "fake.qmodel", PUBLISHED, tiny[1])
    refused(store, labelled, f"claims to be {PUBLISHED}", "not the ViT-B-32 architecture")
    nothing_left(store)
    # The published architecture's config copied in does not make its weights fit.
    dressed = make_pack(
        tmp_path / "dressed.qmodel",
        PUBLISHED,
        tiny[1],
        config={"model_cfg": open_clip.get_model_config("ViT-B-32"), "preprocess_cfg": {}},
    )
    refused(store, dressed, f"claims to be {PUBLISHED}", "do not have the shapes")
    nothing_left(store)
    assert not store.is_installed(PUBLISHED)


def test_a_pack_never_silently_replaces_an_installed_model_and_its_vectors_stay_apart(
    tmp_path,
    hub,  # noqa: F811
    tiny,  # noqa: F811
    other_weights,
    capsys,
    monkeypatch,
) -> None:
    store = ModelStore(tmp_path / "store", endpoint=hub.url)
    store.download(HUB_SPEC)
    genuine = load_encoder(HUB_SPEC, device="cpu", cache_dir=tmp_path / "c", store_dir=store.root)
    assert genuine.model_key == HUB_SPEC

    impostor = make_pack(tmp_path / "impostor.qmodel", HUB_SPEC, other_weights)
    refused(store, impostor, "already installed with other weights", "--replace")
    kept = load_encoder(HUB_SPEC, device="cpu", cache_dir=tmp_path / "c", store_dir=store.root)
    assert kept.model_key == HUB_SPEC
    assert np.array_equal(kept.encode_images(photos()), genuine.encode_images(photos()))

    # A pack of the very weights installed changes nothing (still the download's identity).
    same = store.import_pack(make_pack(tmp_path / "same.qmodel", HUB_SPEC, tiny[1]))
    assert same.origin == "download" and same.model_key == HUB_SPEC

    # Asked for, the pack replaces it, under an identity of its own.
    replaced = store.import_pack(impostor, replace=True)
    digest = hashlib.sha256(other_weights).hexdigest()
    assert replaced.origin == "pack"
    assert replaced.model_key == f"{HUB_SPEC} [pack sha256-{digest[:16]}]"
    loaded = load_encoder(HUB_SPEC, device="cpu", cache_dir=tmp_path / "c", store_dir=store.root)
    assert loaded.model_key == replaced.model_key != genuine.model_key

    # The CLI says where it came from and under which identity its vectors are kept.
    monkeypatch.setattr("app.paths.models_dir", lambda: store.root)
    assert main(["models", "list", "--json"]) == 0
    rows = {row["spec"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows[HUB_SPEC]["origin"] == "pack"
    assert rows[HUB_SPEC]["model_key"] == replaced.model_key
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith(HUB_SPEC))
    assert "from a pack" in line and replaced.model_key in line


def test_the_cli_refuses_a_different_pack_without_replace_and_takes_it_with(
    tmp_path,
    hub,  # noqa: F811
    other_weights,
    capsys,
    monkeypatch,
) -> None:
    store = ModelStore(tmp_path / "store", endpoint=hub.url)
    store.download(HUB_SPEC)
    monkeypatch.setattr("app.paths.models_dir", lambda: store.root)
    impostor = make_pack(tmp_path / "impostor.qmodel", HUB_SPEC, other_weights)
    assert main(["models", "import", str(impostor)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already installed with other weights" in err
    assert main(["models", "import", "--replace", str(impostor)]) == 0
    out = capsys.readouterr().out
    assert "not verified as the published model" in out and "[pack sha256-" in out


# --- zip bombs, links, paths, broken manifests --------------------------------------------------


def test_a_zip_bomb_stops_at_its_declared_size_and_leaves_nothing(tmp_path, tiny) -> None:  # noqa: F811
    declared = len(tiny[1])
    bomb_size = 64 << 20  # 64 MB of zeros deflate to ~64 kB

    pack = tmp_path / "bomb.qmodel"
    with zipfile.ZipFile(pack, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        files = {
            CONFIG_NAME: json.dumps({"model_cfg": TINY_CONFIG}).encode(),
            WEIGHTS_NAME: tiny[1],
        }
        manifest = {
            "format": PACK_FORMAT,
            "version": 1,
            "spec": HUB_SPEC,
            "files": {
                name: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
                for name, data in files.items()
            },
        }
        archive.writestr(MANIFEST_NAME, json.dumps(manifest))
        archive.writestr(CONFIG_NAME, files[CONFIG_NAME])
        with archive.open(WEIGHTS_NAME, "w", force_zip64=True) as handle:
            zeros = bytes(1 << 20)
            for _ in range(bomb_size >> 20):
                handle.write(zeros)
    assert pack.stat().st_size < 1 << 20

    store = ModelStore(tmp_path / "store")
    reports: list[Progress] = []
    with pytest.raises(BadInputError) as caught:
        store.import_pack(pack, progress=reports.append)
    assert "larger than its manifest says" in str(caught.value)
    assert "\n" not in str(caught.value)
    # It stopped at the declared size: it never wrote the 64 MB out.
    assert max(report.done for report in reports) <= declared + len(files[CONFIG_NAME])
    nothing_left(store)


def test_a_pack_larger_than_the_free_disk_is_refused_before_anything_is_written(
    tmp_path,
    tiny,  # noqa: F811
) -> None:
    huge = 10**15  # 1 PB: no test machine has it free
    pack = make_pack(
        tmp_path / "huge.qmodel",
        HUB_SPEC,
        tiny[1],
        manifest={
            "files": {
                CONFIG_NAME: {"sha256": "0" * 64, "size": 10},
                WEIGHTS_NAME: {"sha256": hashlib.sha256(tiny[1]).hexdigest(), "size": huge},
            }
        },
    )
    store = ModelStore(tmp_path / "store")
    reports: list[Progress] = []
    with pytest.raises(BadInputError, match="GB free") as caught:
        store.import_pack(pack, progress=reports.append)
    assert "\n" not in str(caught.value) and "nothing was installed" in str(caught.value)
    assert reports == []
    nothing_left(store)


def _link_weights(archive: zipfile.ZipFile, files: dict[str, bytes]) -> None:
    archive.writestr(CONFIG_NAME, files[CONFIG_NAME])
    link = zipfile.ZipInfo(WEIGHTS_NAME)
    link.create_system = 3
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    archive.writestr(link, files[WEIGHTS_NAME])


def _with_extra(name: str) -> Callable[[zipfile.ZipFile, dict[str, bytes]], None]:
    def write(archive: zipfile.ZipFile, files: dict[str, bytes]) -> None:
        for entry, data in files.items():
            archive.writestr(entry, data)
        archive.writestr(name, b"x")

    return write


def _twice(archive: zipfile.ZipFile, files: dict[str, bytes]) -> None:
    import warnings

    for entry, data in files.items():
        archive.writestr(entry, data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Duplicate name"
        archive.writestr(WEIGHTS_NAME, b"second copy")


@pytest.mark.parametrize(
    ("entries", "phrase"),
    [
        (_link_weights, "is a link, not a plain file"),
        (_with_extra("../../outside.txt"), "unexpected entry '../../outside.txt'"),
        (_with_extra("/etc/cron.d/job"), "unexpected entry '/etc/cron.d/job'"),
        (_with_extra("models/"), "is a folder or special file"),
        (_twice, "holds an entry twice"),
    ],
)
def test_links_paths_folders_and_twins_in_a_pack_are_refused(tmp_path, entries, phrase) -> None:
    link_text = b"/etc/passwd"
    pack = make_pack(tmp_path / "odd.qmodel", HUB_SPEC, link_text, entries=entries)
    store = ModelStore(tmp_path / "store")
    refused(store, pack, "is not a Quadrat model pack", phrase)
    nothing_left(store)
    assert not (tmp_path / "outside.txt").exists()


@pytest.mark.parametrize(
    ("manifest", "phrase"),
    [
        (b"[" * 200_000 + b"]" * 200_000, "unreadable manifest.json"),
        (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "unreadable manifest.json"),
        (b" " * (2 << 20), "manifest.json is too large"),
    ],
)
def test_a_deeply_nested_or_huge_manifest_is_one_line(tmp_path, manifest, phrase) -> None:
    pack = tmp_path / "nested.qmodel"
    with zipfile.ZipFile(pack, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(MANIFEST_NAME, manifest)
    store = ModelStore(tmp_path / "store")
    refused(store, pack, phrase)
    nothing_left(store)


@pytest.mark.parametrize(
    ("changes", "phrase"),
    [
        ({"version": "one"}, "its version 'one' is not a version number"),
        ({"version": None}, "is not a version number"),
        ({"version": 1.5}, "is not a version number"),
        ({"version": 99}, "made by a newer Quadrat"),
        ({"spec": 7}, "names no model"),
        (
            {"files": {CONFIG_NAME: {"sha256": "0" * 64, "size": "big"}, WEIGHTS_NAME: {}}},
            "its file list is wrong",
        ),
    ],
)
def test_a_bad_version_or_field_in_the_manifest_is_one_line(
    tmp_path,
    tiny,  # noqa: F811
    changes,
    phrase,
) -> None:
    pack = make_pack(tmp_path / "bad.qmodel", HUB_SPEC, tiny[1], manifest=changes)
    store = ModelStore(tmp_path / "store")
    refused(store, pack, phrase)
    nothing_left(store)


# --- an import killed half way --------------------------------------------------------------

_STALLED_IMPORT = """
import sys, time
from pathlib import Path
from engine.models.store import ModelStore

started = Path(sys.argv[3])

def stall(progress):
    started.touch()
    time.sleep(120)  # until killed

ModelStore(Path(sys.argv[1])).import_pack(Path(sys.argv[2]), progress=stall)
"""


def test_a_killed_import_leaves_no_hidden_folder_once_the_store_is_used_again(
    tmp_path,
    tiny,  # noqa: F811
) -> None:
    pack = make_pack(tmp_path / "tiny.qmodel", HUB_SPEC, tiny[1])
    root = tmp_path / "store"
    started = tmp_path / "started"
    importer = subprocess.Popen(
        [sys.executable, "-c", _STALLED_IMPORT, str(root), str(pack), str(started)],
        cwd=Path(__file__).resolve().parent.parent,
    )
    try:
        deadline = time.monotonic() + 120
        while not started.exists():
            assert importer.poll() is None, "the import ended before it stalled"
            assert time.monotonic() < deadline, "the import never started"
            time.sleep(0.05)
        incoming = [p for p in root.iterdir() if p.name.startswith(".incoming-") and p.is_dir()]
        assert len(incoming) == 1 and any(incoming[0].iterdir())
        # While its importer lives, another process leaves its folder alone.
        store = ModelStore(root)
        assert [m.spec for m in store.installed()] == ["demo"]
        assert incoming[0].is_dir()
    finally:
        os.kill(importer.pid, signal.SIGKILL)
        importer.wait()
    assert incoming[0].is_dir()  # the kill leaked it
    assert [m.spec for m in ModelStore(root).installed()] == ["demo"]  # listing cleans up
    assert list(root.iterdir()) == []
    # And the next import works.
    assert ModelStore(root).import_pack(pack).spec == HUB_SPEC


def test_a_stale_folder_from_an_older_quadrat_is_removed_before_the_next_import(
    tmp_path,
    tiny,  # noqa: F811
) -> None:
    root = tmp_path / "store"
    stale = root / ".incoming-abc123"
    stale.mkdir(parents=True)
    (stale / WEIGHTS_NAME).write_bytes(b"\0" * 4096)
    old = time.time() - 2 * 3600
    os.utime(stale, (old, old))
    fresh = root / ".incoming-def456"  # no lock yet, just made: not touched
    fresh.mkdir()
    ModelStore(root).import_pack(make_pack(tmp_path / "t.qmodel", HUB_SPEC, tiny[1]))
    assert not stale.exists() and fresh.is_dir()


# --- the hub token and redirects ------------------------------------------------------------


@pytest.fixture
def redirecting(tiny) -> Iterator[tuple[str, list, list]]:  # noqa: F811
    """A hub whose weights redirect to a second server (another origin, like the hub's CDN);
    each records the Authorization header of every request it gets."""
    hub_seen: list[tuple[str, str | None]] = []
    cdn_seen: list[tuple[str, str | None]] = []
    files = hub_files(tiny[1])
    servers: list[http.server.ThreadingHTTPServer] = []

    def handler(seen: list, answer: Callable) -> type[http.server.BaseHTTPRequestHandler]:
        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:  # noqa: N802
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self) -> None:  # noqa: N802
                seen.append((self.path, self.headers.get("Authorization")))
                answer(self)

        return Handler

    def start(seen: list, answer: Callable) -> str:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler(seen, answer))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    def from_cdn(request: http.server.BaseHTTPRequestHandler) -> None:
        body = tiny[1]
        request.send_response(200)
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)

    cdn = start(cdn_seen, from_cdn)

    def from_hub(request: http.server.BaseHTTPRequestHandler) -> None:
        body = files.get(request.path)
        if request.path.endswith(WEIGHTS_NAME):
            request.send_response(302)
            request.send_header("Location", f"{cdn}/signed/weights?sig=1")
            request.send_header("Content-Length", "0")
            request.end_headers()
        elif body is None:
            request.send_response(404)
            request.send_header("Content-Length", "0")
            request.end_headers()
        else:
            request.send_response(200)
            request.send_header("Content-Length", str(len(body)))
            request.end_headers()
            request.wfile.write(body)

    url = start(hub_seen, from_hub)
    yield url, hub_seen, cdn_seen
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_hub_token_goes_to_the_hub_and_never_across_a_redirect(
    tmp_path, redirecting, monkeypatch
) -> None:
    url, hub_seen, cdn_seen = redirecting
    monkeypatch.setenv("HF_TOKEN", "hf_secret_token")
    store = ModelStore(tmp_path / "store", endpoint=url)
    installed = store.download(HUB_SPEC)
    assert installed.spec == HUB_SPEC and store.is_installed(HUB_SPEC)
    assert hub_seen and all(auth == "Bearer hf_secret_token" for _, auth in hub_seen)
    assert cdn_seen == [("/signed/weights?sig=1", None)]
