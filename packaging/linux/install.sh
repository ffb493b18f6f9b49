#!/bin/sh
# Install Quadrat for the current user (no root): the program in ~/.local/share/quadrat/app,
# the command ~/.local/bin/quadrat, a menu entry and its icon. Run again to upgrade: libraries,
# judgments and settings live elsewhere (platformdirs) and are kept.
set -eu
src="$(dirname "$(readlink -f "$0")")"
data="${XDG_DATA_HOME:-$HOME/.local/share}"
dest="$data/quadrat"
mkdir -p "$dest" "$HOME/.local/bin" "$data/applications" "$data/icons/hicolor/scalable/apps"
rm -rf "$dest/app.new" && cp -a "$src/app" "$dest/app.new"
rm -rf "$dest/app" && mv "$dest/app.new" "$dest/app"
cp "$src/quadrat" "$dest/quadrat"
ln -sf "$dest/quadrat" "$HOME/.local/bin/quadrat"
cp "$src/quadrat.svg" "$data/icons/hicolor/scalable/apps/quadrat.svg"
sed "s|^Exec=.*|Exec=$dest/quadrat gui|" "$src/quadrat.desktop" > "$data/applications/quadrat.desktop"
command -v update-desktop-database >/dev/null && update-desktop-database "$data/applications" || true
echo "Quadrat installed: run 'quadrat' or find it in the applications menu."
