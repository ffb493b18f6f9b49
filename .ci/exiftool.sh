# Sourced by .ci/run: exiftool for the XMP sidecar tests (tests/test_xmp.py reads the sidecars
# Quadrat writes back with it). Installs Debian's libimage-exiftool-perl when exiftool is
# missing; where apt cannot install it, CI stops here (under CI the tests would fail, not skip).

if ! command -v exiftool >/dev/null 2>&1; then
    echo "ci: installing libimage-exiftool-perl" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq </dev/null
    apt-get install -y -qq --no-install-recommends libimage-exiftool-perl </dev/null >/dev/null
fi
if ! command -v exiftool >/dev/null 2>&1; then
    echo "ci: exiftool is still missing after installing libimage-exiftool-perl" >&2
    exit 1
fi
echo "ci: exiftool $(exiftool -ver) for the XMP sidecar tests" >&2
