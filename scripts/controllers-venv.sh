#!/usr/bin/env bash
# Builds the Python environments for the real-controller tests
# (crates/offlow/tests/controllers.rs): os-ken's `osken-manager` running the
# `simple_switch_13` app, and Faucet.
#
# Layout under ${OFFLOW_VENV:-/var/cache/offlow/venv}:
#   osken/                 venv with os-ken==3.1.1 (the last release that
#                          still ships the `osken-manager` command)
#   faucet/                venv with faucet (it pins os_ken==3.1.0, which
#                          conflicts with os-ken==3.1.1, hence two venvs)
#   simple_switch_13.py    the app, taken from the os-ken 1.4.1 wheel (the
#                          app was dropped from the package after 1.4.1)
#   .stamp                 written last; its presence (with matching
#                          content) makes a rerun a no-op
#
# Idempotent and fast when done. Needs python3 with the venv module
# (Debian 12: apt-get install python3-venv python3-dev build-essential;
# the last two build pytricia when no wheel fits; flock is util-linux's).
# Network: PyPI.
set -euo pipefail

ROOT="${OFFLOW_VENV:-/var/cache/offlow/venv}"
PY="${PYTHON:-python3}"
OSKEN_VERSION="3.1.1"
OSKEN_APP_VERSION="1.4.1"
FAUCET_VERSION="1.10.12"
STAMP_CONTENT="osken=${OSKEN_VERSION} app=${OSKEN_APP_VERSION} faucet=${FAUCET_VERSION}"

report() {
    echo "controllers-venv: osken-manager    ${ROOT}/osken/bin/osken-manager"
    echo "controllers-venv: simple_switch_13 ${ROOT}/simple_switch_13.py"
    echo "controllers-venv: faucet           ${ROOT}/faucet/bin/faucet"
}

# Concurrent callers (parallel tests) wait for the first one's build.
mkdir -p "$(dirname "${ROOT}")"
exec 9>"${ROOT}.lock"
flock 9

if [ -f "${ROOT}/.stamp" ] && [ "$(cat "${ROOT}/.stamp")" = "${STAMP_CONTENT}" ] \
    && [ -x "${ROOT}/osken/bin/osken-manager" ] && [ -x "${ROOT}/faucet/bin/faucet" ] \
    && [ -f "${ROOT}/simple_switch_13.py" ]; then
    report
    exit 0
fi

mkdir -p "${ROOT}"
rm -f "${ROOT}/.stamp"

make_venv() {
    local dir="$1"
    shift
    if [ ! -x "${dir}/bin/pip" ]; then
        echo "controllers-venv: creating ${dir}"
        "${PY}" -m venv "${dir}"
    fi
    echo "controllers-venv: pip install $* into ${dir}"
    "${dir}/bin/pip" install --quiet --disable-pip-version-check "$@"
}

make_venv "${ROOT}/osken" "os-ken==${OSKEN_VERSION}"
make_venv "${ROOT}/faucet" "faucet==${FAUCET_VERSION}"

# The app file: fetch the old wheel (no dependencies) and unzip one member.
# The venv's python does the unzip so `unzip` need not be installed.
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
"${ROOT}/osken/bin/pip" download --quiet --disable-pip-version-check --no-deps \
    --only-binary=:all: -d "${tmp}" "os-ken==${OSKEN_APP_VERSION}"
"${ROOT}/osken/bin/python" - "${tmp}" "${ROOT}/simple_switch_13.py" <<'EOF'
import glob, sys, zipfile
wheels = glob.glob(sys.argv[1] + "/os_ken-*.whl")
if len(wheels) != 1:
    sys.exit("controllers-venv: expected one os_ken wheel, found %r" % wheels)
with zipfile.ZipFile(wheels[0]) as z:
    data = z.read("os_ken/app/simple_switch_13.py")
with open(sys.argv[2], "wb") as f:
    f.write(data)
EOF

# Smoke: both commands start far enough to print their help.
# (Eventlet's deprecation warning on stderr is noise: dropped.)
"${ROOT}/osken/bin/osken-manager" --help >/dev/null 2>&1
PATH="${ROOT}/faucet/bin:${PATH}" "${ROOT}/faucet/bin/faucet" --help >/dev/null 2>&1

echo "${STAMP_CONTENT}" >"${ROOT}/.stamp"
report
