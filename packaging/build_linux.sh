#!/usr/bin/env bash
# Build the Linux bundle and pack it: packaging/build_linux.sh [cpu|gpu]
#   cpu (default, what `make package` builds): runs on any x86-64 Linux, no GPU used. Built from
#        whichever torch the build environment has (packaging/linux/variant.py says which):
#        - PyPI's torch, a CUDA build (what `pip install -e '.[package]'` installs):
#          packaging/linux/cuda_stubs.py removes torch's CUDA and NVIDIA libraries and triton
#          from the bundle and writes tiny stubs in place of those still named; the runtime hook
#          packaging/linux/rthook_stubbed_torch.py then makes torch report a CPU-only build.
#        - a CPU-only torch: only torchvision's CUDA libraries are stubbed (PyPI's torchvision
#          is a CUDA build even beside a CPU torch).
#   gpu: PyPI's CUDA torch with its NVIDIA libraries (~5.6 GB installed, ~2.6 GB as .tar.xz).
# Needs gcc and binutils' readelf (the stubs) and xz.
# Output: dist/Quadrat/ (the bundle) and dist/Quadrat-<version>-linux-<variant>.tar.xz
set -euo pipefail
variant="${1:-cpu}"
case "$variant" in cpu|gpu) ;; *) echo "usage: $0 [cpu|gpu]" >&2; exit 2 ;; esac
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
version="$($PYTHON -c 'from importlib.metadata import version; print(version("quadrat"))')"
# What will be built from this torch (or why it cannot be), said before the long build.
plan="$($PYTHON packaging/linux/variant.py "$variant")"
echo "$plan"

start=$(date +%s)
$PYTHON -m PyInstaller --noconfirm --distpath dist --workpath build/pyinstaller packaging/quadrat.spec
bundle=dist/Quadrat
if [[ "$variant" == cpu ]]; then
    $PYTHON packaging/linux/cuda_stubs.py "$bundle/_internal"
fi
# torch must import and encode in the bundle, on CPU, before anything is packed (--version is
# answered without torch; the self-test indexes and searches the demo).
env -i HOME="$(mktemp -d)" PATH=/usr/bin:/bin QT_QPA_PLATFORM=offscreen "$bundle/Quadrat" --self-test

stage="build/stage/Quadrat-$version-linux-$variant"
rm -rf "$stage" && mkdir -p "$stage"
cp -a "$bundle" "$stage/app"
cp packaging/linux/quadrat.desktop packaging/linux/quadrat.svg packaging/linux/install.sh "$stage/"
cat > "$stage/quadrat" <<'LAUNCH'
#!/bin/sh
# Start Quadrat from wherever this folder was unpacked or installed.
here="$(dirname "$(readlink -f "$0")")"
exec "$here/app/Quadrat" "$@"
LAUNCH
chmod +x "$stage/quadrat" "$stage/install.sh"
archive="dist/Quadrat-$version-linux-$variant.tar.xz"
tar -C build/stage -cf - "$(basename "$stage")" | xz -T0 -6 > "$archive"
end=$(date +%s)
echo "${plan/building/built}"
echo "built $archive in $((end - start)) s:" \
     "$(du -sh "$archive" | cut -f1) compressed, $(du -sh "$stage" | cut -f1) installed"
