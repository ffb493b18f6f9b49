"""Fast checks of the packaging files: nothing here builds a bundle (see README "Packaging")."""

from __future__ import annotations

import ast
import configparser
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGING = ROOT / "packaging"


def test_spec_parses_and_collects_what_the_hooks_miss() -> None:
    source = (PACKAGING / "quadrat.spec").read_text(encoding="utf-8")
    ast.parse(source)
    for needed in ("_stable", "open_clip", "engine.catalog.migrations", '"resources"', "faiss"):
        assert needed in source, needed
    assert (PACKAGING / "entry.py").is_file()


def test_entry_answers_version_from_the_package_metadata() -> None:
    from importlib.metadata import version

    out = subprocess.run(
        ["python", str(PACKAGING / "entry.py"), "--version"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == f"Quadrat {version('quadrat')}"


def test_desktop_entry_is_well_formed() -> None:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    parser.read(PACKAGING / "linux" / "quadrat.desktop", encoding="utf-8")
    entry = parser["Desktop Entry"]
    assert entry["Type"] == "Application"
    assert entry["Name"] == "Quadrat"
    assert entry["Exec"].split()[0] == "quadrat"
    assert entry["Icon"] == "quadrat"
    assert entry["Categories"].endswith(";")


def test_icon_is_svg() -> None:
    root = ET.parse(PACKAGING / "linux" / "quadrat.svg").getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"


@pytest.mark.parametrize(
    "script", ["build_linux.sh", "linux/install.sh", "windows/build_standin.sh"]
)
def test_shell_scripts_parse(script: str) -> None:
    result = subprocess.run(["sh", "-n", str(PACKAGING / script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_install_script_installs_per_user(tmp_path: Path) -> None:
    """install.sh run from an unpacked archive puts the command, menu entry and icon in HOME."""
    archive = tmp_path / "Quadrat-x-linux-cpu"
    (archive / "app").mkdir(parents=True)
    (archive / "app" / "Quadrat").write_text('#!/bin/sh\necho frozen "$@"\n')
    (archive / "app" / "Quadrat").chmod(0o755)
    for name in ("install.sh", "quadrat.desktop", "quadrat.svg"):
        (archive / name).write_bytes((PACKAGING / "linux" / name).read_bytes())
    (archive / "quadrat").write_text(
        '#!/bin/sh\nhere="$(dirname "$(readlink -f "$0")")"\nexec "$here/app/Quadrat" "$@"\n'
    )
    (archive / "quadrat").chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    subprocess.run(["sh", str(archive / "install.sh")], env=env, check=True, timeout=60)
    data = home / ".local" / "share"
    desktop = (data / "applications" / "quadrat.desktop").read_text()
    assert f"Exec={data}/quadrat/quadrat gui" in desktop
    assert (data / "icons" / "hicolor" / "scalable" / "apps" / "quadrat.svg").is_file()
    out = subprocess.run(
        [str(home / ".local" / "bin" / "quadrat"), "--self-test"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "frozen --self-test"
