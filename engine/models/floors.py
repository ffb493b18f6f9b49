"""The oldest versions of the model libraries whose APIs the loaders use, checked where they are
used (pyproject.toml states the same floors; a test keeps the two equal).

An older install that slipped into a user's own environment would not fail loudly by itself:
before transformers 4.56 `from_pretrained(dtype=...)` is ignored, so a VLM loads in fp32 at
twice the memory; before open_clip 3.0 there is no `local-dir:` model name, which every model in
the store loads through. So the loader refuses it in one line that names the fix.
"""

from __future__ import annotations

import re

from engine.errors import ModelLoadError

# The distribution's name (as pip and pyproject.toml spell it) -> the oldest version that works.
FLOORS: dict[str, str] = {
    "open_clip_torch": "3.0",
    "transformers": "4.56",
}


def version_tuple(version: str) -> tuple[int, ...]:
    """The leading numeric release of a version string: "4.56.0.dev0" -> (4, 56, 0)."""
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", version)
    if match is None:
        return ()
    return tuple(int(part) for part in match.group(1).split("."))


def require(distribution: str, installed: str, what: str) -> None:
    """Raise a one-line `ModelLoadError` when `installed` (the imported module's __version__)
    is older than the floor of `distribution`; `what` says what needed it."""
    floor = FLOORS[distribution]
    if version_tuple(installed) >= version_tuple(floor):
        return
    raise ModelLoadError(
        f"{what} needs {distribution} {floor} or newer and {installed or 'an unknown version'} "
        f"is installed; update it with: pip install -U '{distribution}>={floor}'"
    )
