#!/usr/bin/env bash
# Prove packaging/windows/quadrat.nsi compiles, with Debian's makensis (apt-get install nsis),
# against a stand-in payload shaped like the Windows bundle (Quadrat.exe + _internal\).
# Output: build/windows/Quadrat-<version>-standin-setup.exe (not a working installer).
set -euo pipefail
cd "$(dirname "$0")/../.."
version="$(python3 -c 'from importlib.metadata import version; print(version("quadrat"))')"
payload="build/windows/standin/Quadrat"
rm -rf "$payload" && mkdir -p "$payload/_internal/resources"
printf 'stand-in for the PyInstaller executable\n' > "$payload/Quadrat.exe"
cp resources/guide.md "$payload/_internal/resources/"
out="$PWD/build/windows/Quadrat-$version-standin-setup.exe"
makensis -V2 -DVERSION="$version" -DPAYLOAD="$PWD/$payload" -DOUTFILE="$out" packaging/windows/quadrat.nsi
ls -l "$out"
