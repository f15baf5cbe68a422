#!/usr/bin/env bash
# Runs os-ken's OpenFlow Switch Test Tool (os_ken/tests/switch/tester.py,
# the OpenFlow 1.3 cases: match, action, group, meter; 991 in all) against
# offlow or, for comparison, an Open vSwitch 3.1 userspace bridge.
#
#   scripts/osken-switch-test.sh [--target offlow|ovs] [--folders match,action,group,meter]
#                                [--timeout SECONDS] [--out DIR] [--offlow BIN]
#                                [--cases FILE]
#
# Topology (one network namespace of its own, IPv6 off, removed on exit):
#   target (datapath id 1): offlow on t1 t2 t3 (or an OVS bridge br-target)
#   tester (datapath id 2): an OVS netdev bridge br-tester on s1 s2 s3,
#                           other_config:flow-limit=0 (no datapath flow cache)
#   tN <-> sN veth pairs (the cases hard-code in_port=1, output:2, ...)
#   osken-manager with the tester module, both switches connected to it
#   over the namespace's loopback.
# One osken-manager run per folder (a hang loses one folder, not the run),
# each bounded by --timeout (default 900 s). With --cases FILE only the case
# files listed in FILE (paths relative to the of13 folder, one per line,
# e.g. `action/00_OUTPUT.json`) run: a representative subset for CI.
#
# The tester (osken-manager) runs at nice -10: its throughput cases pace
# traffic with 10 ms sleeps, which a loaded machine stretches.
# Output: DIR (default target/osken-switch-test/TARGET) holds one log per
# folder, results.tsv (folder, case, OK/ERROR, reason) and summary.md (the
# per-folder table). The last line printed is `total: OK N / M`.
# Needs root, ovs-vsctl/ovsdb-server/ovs-vswitchd (Debian openvswitch-switch)
# and the os-ken venv (scripts/controllers-venv.sh builds it).
set -euo pipefail

TARGET=offlow
FOLDERS=match,action,group,meter
TIMEOUT=900
OUT=""
CASES=""
HERE="$(cd "$(dirname "$0")/.." && pwd)"
OFFLOW="${HERE}/target/release/offlow"
while [ $# -gt 0 ]; do
    case "$1" in
    --target) TARGET="$2"; shift 2 ;;
    --folders) FOLDERS="$2"; shift 2 ;;
    --timeout) TIMEOUT="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --offlow) OFFLOW="$2"; shift 2 ;;
    --cases) CASES="$2"; shift 2 ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "osken-switch-test: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
case "$TARGET" in offlow|ovs) ;; *) echo "--target must be offlow or ovs" >&2; exit 2 ;; esac
[ "$(id -u)" = 0 ] || { echo "osken-switch-test: needs root (namespaces, OVS)" >&2; exit 2; }
for t in ovs-vsctl ovsdb-server ovs-vswitchd ovsdb-tool ip timeout; do
    command -v "$t" >/dev/null || { echo "osken-switch-test: $t not found" >&2; exit 2; }
done
if [ "$TARGET" = offlow ] && [ ! -x "$OFFLOW" ]; then
    echo "osken-switch-test: no offlow binary at $OFFLOW (cargo build --release -p offlow)" >&2
    exit 2
fi
OUT="${OUT:-${HERE}/target/osken-switch-test/${TARGET}}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

VENV="${OFFLOW_VENV:-/var/cache/offlow/venv}"
"${HERE}/scripts/controllers-venv.sh" >/dev/null
MANAGER="${VENV}/osken/bin/osken-manager"
CASEDIR="$("${VENV}/osken/bin/python" -c \
    'import os, os_ken.tests.switch as s; print(os.path.join(os.path.dirname(s.__file__), "of13"))')"

TAG="osk$$"
NS="$TAG"
RUN="$(mktemp -d "/tmp/${TAG}.XXXX")"
OFPORT=6653
PIDS=()

cleanup() {
    set +e
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for f in "$RUN"/*.pid; do
        [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null
    done
    sleep 0.3
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
    for f in "$RUN"/*.pid; do
        [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
    done
    ip netns del "$NS" 2>/dev/null
    rm -rf "$RUN"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

in_ns() { ip netns exec "$NS" "$@"; }

ip netns add "$NS"
in_ns sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
in_ns ip link set lo up
for n in 1 2 3; do
    in_ns ip link add "t$n" type veth peer name "s$n"
    for i in "t$n" "s$n"; do
        in_ns ip link set "$i" up
        # Software checksums and segmentation: the cases compare bytes.
        in_ns ethtool -K "$i" tx off tso off gso off gro off >/dev/null 2>&1 || true
    done
done

# A private Open vSwitch inside the namespace.
export OVS_RUNDIR="$RUN" OVS_DBDIR="$RUN" OVS_LOGDIR="$RUN" OVS_SYSCONFDIR="$RUN"
ovsdb-tool create "$RUN/conf.db" /usr/share/openvswitch/vswitch.ovsschema
in_ns ovsdb-server "$RUN/conf.db" --remote="punix:$RUN/db.sock" \
    --pidfile="$RUN/ovsdb-server.pid" --log-file="$RUN/ovsdb-server.log" --detach >/dev/null 2>&1
VSCTL=(ovs-vsctl --db="unix:$RUN/db.sock" --timeout=20)
"${VSCTL[@]}" --no-wait init
"${VSCTL[@]}" --no-wait set Open_vSwitch . other_config:flow-limit=0
in_ns ovs-vswitchd "unix:$RUN/db.sock" --pidfile="$RUN/ovs-vswitchd.pid" \
    --log-file="$RUN/ovs-vswitchd.log" --detach >/dev/null 2>&1

bridge() { # name dpid prefix
    "${VSCTL[@]}" add-br "$1" -- set bridge "$1" datapath_type=netdev protocols=OpenFlow13 \
        fail-mode=secure other-config:datapath-id="$2"
    for n in 1 2 3; do
        "${VSCTL[@]}" add-port "$1" "$3$n" -- set interface "$3$n" ofport_request="$n"
    done
    "${VSCTL[@]}" set-controller "$1" "tcp:127.0.0.1:${OFPORT}"
    "${VSCTL[@]}" set controller "$1" max_backoff=1000
}
bridge br-tester 0000000000000002 s

if [ "$TARGET" = ovs ]; then
    bridge br-target 0000000000000001 t
else
    # `ip netns exec` directly, not the in_ns function: a function in the
    # background is a subshell, and $! would be that shell, not offlow
    # (whose process then outlived the run).
    ip netns exec "$NS" "$OFFLOW" run --dpid 1 --tables 255 --port t1 --port t2 --port t3 \
        --controller "tcp:127.0.0.1:${OFPORT}" >"$OUT/offlow.log" 2>&1 &
    PIDS+=($!)
fi

# The case files of one folder (all, or those listed in --cases).
case_dir_for() { # folder -> a directory holding the cases to run
    local folder="$1"
    if [ -z "$CASES" ]; then
        echo "$CASEDIR/$folder"
        return
    fi
    local d="$RUN/cases/$folder"
    mkdir -p "$d"
    grep -E "^${folder}/" "$CASES" | while read -r c; do
        case "$c" in '#'*|'') continue ;; esac
        [ -f "$CASEDIR/$c" ] || { echo "osken-switch-test: no case $c" >&2; exit 2; }
        cp "$CASEDIR/$c" "$d/"
    done
    echo "$d"
}

: >"$OUT/results.tsv"
TOTAL_OK=0
TOTAL=0
ROWS=""
IFS=',' read -r -a FOLDER_LIST <<<"$FOLDERS"
for folder in "${FOLDER_LIST[@]}"; do
    dir="$(case_dir_for "$folder")"
    n_files=$(find "$dir" -name '*.json' | wc -l)
    [ "$n_files" -gt 0 ] || continue
    log="$OUT/$folder.log"
    echo "osken-switch-test: $folder ($n_files case files, timeout ${TIMEOUT}s) ..."
    set +e
    # The tester paces its traffic with 10 ms eventlet sleeps and checks
    # the rates within 10%: on a loaded machine its own sender falls
    # behind (every group and meter case then "receives" 10-30% less than
    # it sent). It runs at a higher priority (nice -10) so the rates it
    # offers are the ones it expects; the switch under test does not.
    in_ns nice -n -10 timeout --kill-after=10 "$TIMEOUT" "$MANAGER" \
        --ofp-listen-host 127.0.0.1 --ofp-tcp-listen-port "$OFPORT" \
        --test-switch-target 0000000000000001 --test-switch-tester 0000000000000002 \
        --test-switch-dir "$dir" os_ken.tests.switch.tester >"$log" 2>&1
    rc=$?
    set -e
    # The tester prints each case file's description, then per case
    # "    <case> ... OK|ERROR" (padded) and, for an error, the reason on the
    # next line; it ends itself with SIGTERM (143).
    "${VENV}/osken/bin/python" - "$log" "$folder" >>"$OUT/results.tsv" <<'PY'
import re, sys
log, folder = sys.argv[1], sys.argv[2]
lines = open(log, errors="replace").read().splitlines()
case = re.compile(r"^    (\S.*?)\s+(OK|ERROR)$")
current = ""
for i, l in enumerate(lines):
    # The tester prints a dot per step, without a newline before the
    # case's own line at times: "......    <case>  OK".
    dots = len(l) - len(l.lstrip("."))
    if dots and not l[dots:].strip():
        continue
    l = l[dots:]
    m = case.match(l)
    if m:
        reason = ""
        if m.group(2) == "ERROR" and i + 1 < len(lines) and lines[i + 1].startswith("        "):
            reason = lines[i + 1].strip().replace("\t", " ")
        print(f"{folder}\t{current}: {m.group(1)}\t{m.group(2)}\t{reason}")
    elif l and not l.startswith(" ") and not l.startswith("---") and "=" not in l[:40] \
            and not l.startswith(("loading app", "instantiating", "waiting", "dpid=", "OK(", "Test files")):
        current = l.strip()
PY
    ok=$(awk -F'\t' -v f="$folder" '$1==f && $3=="OK"' "$OUT/results.tsv" | wc -l)
    all=$(awk -F'\t' -v f="$folder" '$1==f' "$OUT/results.tsv" | wc -l)
    note=""
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then note=" (timed out)"; fi
    echo "osken-switch-test: $folder: OK $ok / $all$note"
    ROWS="${ROWS}| ${folder} | ${ok} | ${all} |${note}
"
    TOTAL_OK=$((TOTAL_OK + ok))
    TOTAL=$((TOTAL + all))
done

{
    echo "# os-ken Switch Test Tool, target: $TARGET ($(date -u '+%Y-%m-%d %H:%M UTC'))"
    echo
    echo "| folder | OK | cases | |"
    echo "|---|---|---|---|"
    printf '%s' "$ROWS"
    echo "| all | ${TOTAL_OK} | ${TOTAL} | |"
} >"$OUT/summary.md"
if [ "$TARGET" = offlow ]; then
    kill -0 "${PIDS[0]}" 2>/dev/null || {
        echo "osken-switch-test: offlow exited during the run (see $OUT/offlow.log)" >&2
        TOTAL_OK=-1
    }
fi
echo "total: OK ${TOTAL_OK} / ${TOTAL}"
