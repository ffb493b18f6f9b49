"""`quadrat models list/download/pack/import/remove`, and `index`/`search` failing fast in one
line when their model is not on disk and there is no network. QUADRAT_HOME isolates every test
(tests/conftest.py); a local server plays the model hub (tests/test_models.py)."""

from __future__ import annotations

import json
import time
import zipfile
from pathlib import Path

import pytest
from PIL import Image

from app.cli import main
from engine.models.folders import MANIFEST_NAME, WEIGHTS_NAME
from tests.test_models import HUB_SPEC, closed_port, hub_files, serve, tiny  # noqa: F401

UNINSTALLED = "ViT-B-32:laion2b_s34b_b79k"


def run(capsys, *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def listed(capsys) -> dict[str, dict]:
    code, out, _ = run(capsys, "models", "list", "--json")
    assert code == 0
    return {row["spec"]: row for row in json.loads(out)}


@pytest.fixture
def online(serve, tiny, monkeypatch):  # noqa: F811 - pytest fixtures
    hub = serve(hub_files(tiny[1]))
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    return hub


@pytest.fixture
def offline(monkeypatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")


def test_list_json_names_the_catalogue_and_what_is_installed(capsys) -> None:
    rows = listed(capsys)
    assert list(rows)[0] == "demo"
    assert rows["demo"]["installed"] is True and rows["demo"]["size_bytes"] > 0
    assert rows[UNINSTALLED]["installed"] is False
    assert 600e6 < rows[UNINSTALLED]["size_bytes"] < 610e6
    assert rows["hf-hub:imageomics/bioclip"]["good_at"]
    code, out, _ = run(capsys, "models", "list")
    assert code == 0 and "demo" in out and "download 605.1 MB" in out


def test_download_then_pack_remove_and_import_again(capsys, online, tiny, tmp_path):  # noqa: F811
    code, out, err = run(capsys, "models", "download", HUB_SPEC)
    assert code == 0, err
    assert f"installed {HUB_SPEC}" in out
    row = listed(capsys)[HUB_SPEC]
    assert row["installed"] is True and row["origin"] == "download"
    assert row["size_bytes"] == len(tiny[1])

    pack = tmp_path / "tiny.qmodel"
    code, out, err = run(capsys, "models", "pack", HUB_SPEC, pack)
    assert code == 0, err
    assert pack.is_file() and str(pack) in out

    code, out, _ = run(capsys, "models", "remove", HUB_SPEC)
    assert code == 0 and f"removed {HUB_SPEC}" in out
    assert HUB_SPEC not in listed(capsys)

    code, out, err = run(capsys, "models", "import", pack)
    assert code == 0, err
    assert f"--model {HUB_SPEC}" in out
    row = listed(capsys)[HUB_SPEC]
    assert row["installed"] is True and row["origin"] == "pack"


def test_a_tampered_pack_exits_2_in_one_line_and_installs_nothing(capsys, online, tmp_path) -> None:
    pack = tmp_path / "good.qmodel"
    assert run(capsys, "models", "pack", HUB_SPEC, pack)[0] == 0
    assert run(capsys, "models", "remove", HUB_SPEC)[0] == 0
    tampered = tmp_path / "tampered.qmodel"
    with zipfile.ZipFile(pack) as src, zipfile.ZipFile(tampered, "w") as dst:
        for name in src.namelist():
            data = src.read(name)
            dst.writestr(name, data[:-1] + bytes([data[-1] ^ 1]) if name == WEIGHTS_NAME else data)
    assert json.loads(zipfile.ZipFile(tampered).read(MANIFEST_NAME))["spec"] == HUB_SPEC

    code, out, err = run(capsys, "models", "import", tampered)
    assert code == 2
    assert err.count("\n") == 1 and "sha256" in err and "nothing was installed" in err
    assert HUB_SPEC not in listed(capsys)


def test_download_offline_exits_1_in_one_line_within_seconds(capsys, offline) -> None:
    started = time.monotonic()
    code, _, err = run(capsys, "models", "download", UNINSTALLED)
    assert time.monotonic() - started < 5
    assert code == 1
    assert err.count("\n") == 1
    assert "--model demo" in err and "quadrat models import PACK" in err


def test_removing_what_is_not_installed_is_a_usage_error(capsys) -> None:
    code, _, err = run(capsys, "models", "remove", UNINSTALLED)
    assert code == 2 and "is not installed" in err


@pytest.fixture
def few_photos(tmp_path: Path) -> Path:
    folder = tmp_path / "photos"
    folder.mkdir()
    for i, colour in enumerate([(200, 30, 30), (30, 200, 30), (30, 30, 200)]):
        Image.new("RGB", (64, 48), colour).save(folder / f"p{i}.jpg")
    return folder


def test_index_and_search_with_a_model_not_on_disk_fail_fast_offline(
    capsys, offline, few_photos, tmp_path
) -> None:
    """Before: 53 s and 45 lines of download retries. Now: one line naming the way on."""
    library = tmp_path / "lib"
    started = time.monotonic()
    code, _, err = run(capsys, "index", few_photos, "--library", library, "--model", UNINSTALLED)
    assert time.monotonic() - started < 5
    assert code == 1
    assert err.count("\n") == 1 and err.startswith(f"error: could not download {UNINSTALLED}")
    assert "--model demo" in err and "quadrat models import PACK" in err

    # the way on works: the demo model indexes offline
    assert run(capsys, "index", few_photos, "--library", library, "--model", "demo")[0] == 0
    started = time.monotonic()
    code, _, err = run(capsys, "search", "red", "--library", library, "--model", UNINSTALLED)
    assert time.monotonic() - started < 5
    assert code == 1 and err.count("\n") == 1 and "quadrat models import PACK" in err
