"""dmgbuild settings for Quadrat: `dmgbuild -s packaging/macos/dmg_settings.py Quadrat out.dmg`.

`dist/Quadrat.app` comes from the same spec on macOS (`pyinstaller packaging/quadrat.spec`,
which adds a BUNDLE step there); -D app=PATH chooses another one. The disk image shows the app
beside an Applications link, so installing is one drag and needs no administrator.
"""

import os.path

application = defines.get("app", "dist/Quadrat.app")  # type: ignore[name-defined]  # noqa: F821
appname = os.path.basename(application)

format = "UDZO"  # zlib-compressed, readable on every supported macOS
files = [application]
symlinks = {"Applications": "/Applications"}
icon_locations = {appname: (140, 120), "Applications": (400, 120)}
window_rect = ((100, 100), (540, 300))
default_view = "icon-view"
icon_size = 96
