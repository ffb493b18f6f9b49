# Sourced by .ci/run: Xvfb and the X libraries Qt's xcb plugin loads, for the tests that open
# the real window on a virtual screen of each size (tests/gui/test_layout.py and
# test_layout_states.py through tools/screenshots.py). Installs Debian's xvfb and the xcb
# libraries when Xvfb or one of them is missing; where apt cannot install them, CI stops here
# (under CI those tests fail rather than skip).

CI_XVFB_PACKAGES="xvfb libx11-xcb1 libxcb-cursor0 libxcb-icccm4 libxcb-image0 libxcb-keysyms1 \
libxcb-randr0 libxcb-render-util0 libxcb-shape0 libxcb-shm0 libxcb-sync1 libxcb-xfixes0 \
libxcb-xkb1 libxkbcommon-x11-0"

ci_xvfb_missing() {
    command -v Xvfb >/dev/null 2>&1 || return 0
    # The libraries the xcb plugin loads that nothing else here pulls in.
    local known
    known="$(ldconfig -p 2>/dev/null || true)"
    for lib in libxcb-cursor.so.0 libxcb-icccm.so.4 libxcb-keysyms.so.1 libxkbcommon-x11.so.0; do
        case "$known" in
            *"$lib"*) ;;
            *) return 0 ;;
        esac
    done
    return 1
}

if ci_xvfb_missing; then
    echo "ci: installing xvfb and the xcb libraries" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq </dev/null
    # shellcheck disable=SC2086  # a list of package names
    apt-get install -y -qq --no-install-recommends $CI_XVFB_PACKAGES </dev/null >/dev/null
fi
if ci_xvfb_missing; then
    echo "ci: Xvfb or an xcb library is still missing after installing $CI_XVFB_PACKAGES" >&2
    exit 1
fi
echo "ci: Xvfb for the window's layout on real screens" >&2
