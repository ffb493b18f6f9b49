#!/usr/bin/env bash
# Build the Linux bundle and pack it: packaging/build_linux.sh [cpu|gpu]
#   gpu: whatever torch the build environment has (PyPI's Linux torch is a CUDA build, ~5.4 GB).
#   cpu: needs a CPU-only torch in the build environment
#        (pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu).
#        packaging/linux/cuda_stubs.py then removes what GPU code is left (PyPI's torchvision is
#        a CUDA build: its extensions name libtorch_cuda.so, libcudart, nvjpeg) and stubs it.
#        If the build environment's torchvision is PyPI's CUDA one, it does not import beside a
#        CPU torch either: run cuda_stubs.py on its site-packages first and build with
#        LD_LIBRARY_PATH=<site-packages> (how the figures in docs/BENCHMARKS.md were made).
#        With PyPI's CUDA torch, QUADRAT_CUDA_STUBS=1 strips torch itself the same way
#        (experimental: torch does not import yet with the stubs, see README "Packaging").
# Output: dist/Quadrat/ (the bundle) and dist/Quadrat-<version>-linux-<variant>.tar.xz
set -euo pipefail
variant="${1:-cpu}"
case "$variant" in cpu|gpu) ;; *) echo "usage: $0 [cpu|gpu]" >&2; exit 2 ;; esac
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
version="$($PYTHON -c 'from importlib.metadata import version; print(version("quadrat"))')"
cuda="$($PYTHON -c 'import torch; print(torch.version.cuda or "")')"
if [[ "$variant" == cpu && -n "$cuda" && "${QUADRAT_CUDA_STUBS:-0}" != 1 ]]; then
    echo "the cpu variant needs a CPU-only torch (this one is CUDA $cuda): install it from" \
         "https://download.pytorch.org/whl/cpu, or set QUADRAT_CUDA_STUBS=1" >&2
    exit 2
fi

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
echo "built $archive in $((end - start)) s:" \
     "$(du -sh "$archive" | cut -f1) compressed, $(du -sh "$stage" | cut -f1) installed"
