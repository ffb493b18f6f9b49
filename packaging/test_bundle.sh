#!/usr/bin/env bash
# Test a built bundle the way a workstation without network meets it:
#   packaging/test_bundle.sh [BUNDLE]     (default dist/Quadrat; run by `make package-test`)
# With a clean HOME, no user environment and (where `unshare` allows it) no network at all:
#   1. the bundle's --self-test (demo written, indexed, searched, judged, metrics, window);
#   2. an offline model pack (tools/make_model_pack.py, made with the build environment's
#      Python) is imported into the frozen app, a demo collection is indexed with that model,
#      and a search with it returns results under the model's hub key.
set -euo pipefail
cd "$(dirname "$0")/.."
bundle="${1:-dist/Quadrat}"
PYTHON="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/home"

if unshare -rn true 2>/dev/null; then
    isolate=(unshare -rn)
    network="no network (unshare -n)"
else
    isolate=()
    network="network not cut (unshare unavailable); proxies point nowhere"
fi
frozen() {
    "${isolate[@]}" env -i HOME="$work/home" PATH=/usr/bin:/bin QT_QPA_PLATFORM=offscreen \
        HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 \
        "$bundle/Quadrat" "$@"
}

echo "testing $bundle: clean HOME, $network"
start=$(date +%s)
frozen --self-test

$PYTHON tools/make_model_pack.py "$work/tiny.qmodel" 2>/dev/null
spec="hf-hub:quadrat/tiny-clip"
frozen models import "$work/tiny.qmodel"
# The list is read whole first: `| grep -q` stops reading at its match, and with pipefail the
# list's broken pipe would fail the check by chance.
listed=$(frozen models list)
grep -q "$spec" <<<"$listed" || { echo "FAIL: $spec not listed after import" >&2; exit 1; }
frozen demo "$work/photos" --images-per-class 2 >/dev/null
frozen index "$work/photos" --library "$work/library" --model "$spec"
frozen search "red circle" --library "$work/library" --top 5 --json > "$work/hits.jsonl"
hits=$(wc -l < "$work/hits.jsonl")
if [[ "$hits" -ne 5 ]]; then
    echo "FAIL: a search with the imported model gave $hits results, not 5" >&2
    exit 1
fi
echo "bundle test passed in $(( $(date +%s) - start )) s: self-test; model pack imported" \
     "offline, $spec indexed the demo and searched it ($hits results)"
