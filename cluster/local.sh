#!/usr/bin/env bash
# A multi-node Ray cluster on this one machine, to try multi-node placement without a cloud: a head
# node at 127.0.0.10 and N worker nodes at 127.0.0.11, 127.0.0.12, ..., with token authentication.
#
#   cluster/local.sh up [N]          start the head and N worker nodes (default 2)
#   cluster/local.sh status          the cluster's addresses, then `ray status`
#   cluster/local.sh down            stop exactly the processes of the cluster that `up` started
#   cluster/local.sh kill            lose the whole cluster: SIGKILL to all of them at once, as a
#                                    crashed machine would (no process gets to clean up)
#   cluster/local.sh remove-node I   lose worker node I the same way (its raylet, its actors)
#   cluster/local.sh add-node I      start worker node I again (or a new one) in the running cluster
#
# Settings, from the environment:
#   RAY                 the ray command (default: this project's .venv/bin/ray, else ray on PATH);
#                       its directory goes first on the nodes' PATH, so a job's `python` is the
#                       Python that runs Ray
#   A3C_LOCAL_DIR       state file, logs and each node's Ray temp dir (default
#                       ${TMPDIR:-/tmp}/a3c-ray-local); keep it short: Ray's unix sockets live
#                       under it and their paths must stay below 108 characters
#   A3C_GCS_PORT        the head's GCS port (default 6379)
#   A3C_DASHBOARD_PORT  dashboard and Jobs API on 127.0.0.1 (default 8265)
#   A3C_CLIENT_PORT     the head's Ray Client port (default 10001)
#   A3C_HEAD_CPUS       logical CPUs of the head (default 1)
#   A3C_NUM_CPUS        logical CPUs of each worker node (default 1)
#   A3C_METRICS_PORT    Prometheus metrics port of the head; node i serves A3C_METRICS_PORT+i
#                       (default 8080)
#   A3C_AGENT_PORT      dashboard agent HTTP port of the head; node i uses A3C_AGENT_PORT+i
#                       (default 52370; each agent also listens on 127.0.0.1, so they must differ)
#
# Every `ray start` runs with RAY_AUTH_MODE=token and the token of ~/.ray/auth_token (made with
# `ray get-auth-token --generate` if there is none). `down` does not use `ray stop`, which stops
# every Ray process on the machine, other clusters and embedded ray.init() instances included: it
# stops the processes `up` recorded and everything they started. Linux only (reads /proc).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -z "${RAY:-}" ]]; then
    if [[ -x "$ROOT/.venv/bin/ray" ]]; then RAY="$ROOT/.venv/bin/ray"; else RAY="$(command -v ray || true)"; fi
fi
DIR="${A3C_LOCAL_DIR:-${TMPDIR:-/tmp}/a3c-ray-local}"
STATE="$DIR/state"
HEAD_IP=127.0.0.10
GCS_PORT="${A3C_GCS_PORT:-6379}"
DASHBOARD_PORT="${A3C_DASHBOARD_PORT:-8265}"
CLIENT_PORT="${A3C_CLIENT_PORT:-10001}"
HEAD_CPUS="${A3C_HEAD_CPUS:-1}"
NUM_CPUS="${A3C_NUM_CPUS:-1}"
METRICS_PORT="${A3C_METRICS_PORT:-8080}"
AGENT_PORT="${A3C_AGENT_PORT:-52370}"
# Seconds `down` waits after SIGTERM before SIGKILL (the GCS takes 20 s or more to stop by itself).
GRACE_SECONDS="${A3C_STOP_GRACE:-5}"
MAX_WORKER_NODES=200
# Marks every process of this cluster: inherited from `ray start` by the GCS, raylets, dashboard
# and, through them, by workers and job drivers.
MARKER="A3C_RAY_LOCAL_CLUSTER=$DIR"
# And each node's processes (raylet, agents, the actors' workers) carry their node's own marker.
node_marker() { echo "A3C_RAY_LOCAL_NODE=$DIR/n$1"; }
export RAY_AUTH_MODE=token
# Separate nodes, whatever the caller's environment says (=0 is Ray's single-node loopback mode).
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1

die() { echo "local.sh: $*" >&2; exit 1; }

usage() { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; }

# -- processes ---------------------------------------------------------------------------------
alive() { # PID: running, not a zombie
    local stat
    stat="$(ps -o stat= -p "$1" 2>/dev/null || true)"
    [[ -n "$stat" && "$stat" != Z* ]]
}

running_of() { # PIDS...: those still running (not zombies), from one ps call
    (($# > 0)) || return 0
    ps -o pid=,stat= -p "$(echo "$@" | tr ' ' ',')" 2>/dev/null | awk '$2 !~ /^Z/ { printf "%s ", $1 }' || true
}

started_at() { ps -o lstart= -p "$1" 2>/dev/null | tr -s ' ' | sed 's/ /_/g' || true; }

marked_pids() { # [MARK]: processes whose environment holds MARK (default: this cluster's marker)
    grep -lzxF "${1:-$MARKER}" /proc/[0-9]*/environ 2>/dev/null | sed 's|^/proc/\([0-9]*\)/environ$|\1|' || true
}

recorded_pids() { # pids in the state file that still belong to the process recorded
    [[ -f "$STATE" ]] || return 0
    local kind pid start
    while read -r kind pid start; do
        [[ "$kind" == pid ]] || continue
        if alive "$pid" && [[ "$(started_at "$pid")" == "$start" ]]; then echo "$pid"; fi
    done <"$STATE"
}

with_descendants() { # PIDS...: them and every process below them, from one snapshot of ps
    ps -eo pid=,ppid= | awk -v roots="$*" -v self="$$" '
        BEGIN { n = split(roots, r, " "); for (i = 1; i <= n; i++) if (r[i] > 1 && r[i] != self) keep[r[i]] = 1 }
        { parent[$1] = $2 }
        END {
            do { grew = 0; for (p in parent) if (!(p in keep) && (parent[p] in keep)) { keep[p] = 1; grew = 1 } } while (grew)
            for (p in keep) print p
        }' | sort -n | tr '\n' ' '
}

record_pids() {
    local pid known
    known=" $(awk '$1 == "pid" { printf "%s ", $2 }' "$STATE") "
    for pid in $(marked_pids); do
        [[ "$known" == *" $pid "* ]] || echo "pid $pid $(started_at "$pid")" >>"$STATE"
    done
}

# -- commands ----------------------------------------------------------------------------------
start_node() { # INDEX IP CPUS [ray start flags...]
    local i="$1" ip="$2" cpus="$3"; shift 3
    local node_dir="$DIR/n$i"
    mkdir -p "$node_dir"
    echo "node $i $ip cpus=$cpus metrics=$ip:$((METRICS_PORT + i)) logs=$node_dir/session_latest/logs" >>"$STATE"
    if ! env "$MARKER" "$(node_marker "$i")" PATH="$(dirname "$RAY"):$PATH" "$RAY" start \
        --node-ip-address="$ip" --num-cpus="$cpus" --temp-dir="$node_dir" \
        --metrics-export-port=$((METRICS_PORT + i)) \
        --dashboard-agent-listen-port=$((AGENT_PORT + i)) \
        --disable-usage-stats "$@" >"$DIR/n$i.log" 2>&1; then
        record_pids
        tail -n 15 "$DIR/n$i.log" >&2
        return 1
    fi
    record_pids
    echo "local.sh: node $i up at $ip ($cpus CPU, metrics on port $((METRICS_PORT + i)))"
}

cmd_up() {
    local n="${1:-2}" i
    [[ "$n" =~ ^[0-9]+$ ]] && ((n <= MAX_WORKER_NODES)) || die "up N: N is a number of worker nodes (0..$MAX_WORKER_NODES), not '$n'"
    [[ -n "$RAY" && -x "$RAY" ]] || die "no ray command: set RAY=/path/to/ray or install ray[default]"
    [[ -d /proc/self ]] || die "needs Linux (/proc) to tell this cluster's processes from others"
    if [[ -f "$STATE" ]]; then
        [[ -z "$(recorded_pids)$(marked_pids)" ]] || die "a cluster is already up (state in $DIR); stop it first: $0 down"
        rm -f "$STATE"
    fi
    # A session path such as DIR/n12/session_2026-01-01_00-00-00_000000_12345/sockets/plasma_store
    # must fit a unix socket address (107 bytes).
    ((${#DIR} <= 40)) || die "A3C_LOCAL_DIR=$DIR is too long for Ray's socket paths (40 characters at most)"
    mkdir -p "$DIR"
    rm -rf "$DIR"/n[0-9]*
    if [[ -z "${RAY_AUTH_TOKEN:-}${RAY_AUTH_TOKEN_PATH:-}" && ! -s "$HOME/.ray/auth_token" ]]; then
        "$RAY" get-auth-token --generate >/dev/null
        echo "local.sh: generated the cluster token in ~/.ray/auth_token"
    fi
    {
        echo "address $HEAD_IP:$GCS_PORT"
        echo "dashboard http://127.0.0.1:$DASHBOARD_PORT"
        echo "ray $RAY"
    } >"$STATE"
    if ! start_node 0 "$HEAD_IP" "$HEAD_CPUS" --head --port="$GCS_PORT" \
        --dashboard-host=127.0.0.1 --dashboard-port="$DASHBOARD_PORT" \
        --ray-client-server-port="$CLIENT_PORT"; then
        echo "local.sh: the head did not start (log: $DIR/n0.log); stopping what did" >&2
        cmd_down >&2
        exit 1
    fi
    for ((i = 1; i <= n; i++)); do
        if ! start_node "$i" "127.0.0.$((10 + i))" "$NUM_CPUS" --address="$HEAD_IP:$GCS_PORT"; then
            echo "local.sh: worker node $i did not start (log: $DIR/n$i.log); stopping the cluster" >&2
            cmd_down >&2
            exit 1
        fi
    done
    echo "local.sh: cluster up: GCS $HEAD_IP:$GCS_PORT, dashboard and Jobs API http://127.0.0.1:$DASHBOARD_PORT"
    echo "local.sh: submit with: a3c-ray submit --address http://127.0.0.1:$DASHBOARD_PORT --runtime-env cluster/runtime_env.preinstalled.yaml -- --env CartPole-v1"
}

cmd_status() {
    [[ -f "$STATE" ]] || die "no local cluster recorded in $DIR; start one with: $0 up 2"
    local address dashboard
    address="$(awk '$1 == "address" { print $2 }' "$STATE")"
    dashboard="$(awk '$1 == "dashboard" { print $2 }' "$STATE")"
    echo "GCS address:        $address"
    echo "dashboard/Jobs API: $dashboard"
    awk '$1 == "node" { $1 = "node"; print }' "$STATE"
    echo "running processes:  $(with_descendants $(recorded_pids) $(marked_pids) | wc -w)"
    echo
    "$RAY" status --address "$address"
}

cmd_down() {
    if [[ ! -f "$STATE" ]]; then
        echo "local.sh: no local cluster recorded in $DIR; nothing to stop"
        return 0
    fi
    local pids left waited=0
    pids="$(with_descendants $(recorded_pids) $(marked_pids))"
    if [[ -n "${pids// /}" ]]; then
        kill -TERM $pids 2>/dev/null || true
        while left="$(running_of $pids)" && [[ -n "$left" ]]; do
            if ((waited >= GRACE_SECONDS)); then
                kill -KILL $left 2>/dev/null || true
                sleep 1
                break
            fi
            sleep 1
            waited=$((waited + 1))
        done
    fi
    rm -f "$STATE"
    echo "local.sh: stopped $(echo $pids | wc -w) processes; node logs stay in $DIR until the next up"
}

kill_now() { # PIDS...: SIGKILL them, and whatever they started meanwhile, until none runs
    local pids="$*" left tries=0
    while [[ -n "${pids// /}" ]] && ((tries < 5)); do
        kill -KILL $pids 2>/dev/null || true
        sleep 0.5
        left="$(running_of $pids)"
        pids="$(with_descendants $left)"
        tries=$((tries + 1))
    done
}

cmd_kill() {
    if [[ ! -f "$STATE" ]]; then
        echo "local.sh: no local cluster recorded in $DIR; nothing to kill"
        return 0
    fi
    local pids
    pids="$(with_descendants $(recorded_pids) $(marked_pids))"
    kill_now $pids
    # Processes forked between the snapshot and the kill carry the marker too.
    kill_now $(marked_pids)
    rm -f "$STATE"
    echo "local.sh: killed $(echo $pids | wc -w) processes; node logs stay in $DIR until the next up"
}

worker_node_index() { # I: a worker node's index (the head, 0, is not one)
    [[ "${1:-}" =~ ^[0-9]+$ ]] && (($1 >= 1 && $1 <= MAX_WORKER_NODES)) || die "expected a worker node index 1..$MAX_WORKER_NODES, not '${1:-}'"
    [[ -f "$STATE" ]] || die "no local cluster recorded in $DIR; start one with: $0 up 2"
}

cmd_remove_node() {
    worker_node_index "$@"
    local i="$1" pids
    pids="$(with_descendants $(marked_pids "$(node_marker "$i")"))"
    [[ -n "${pids// /}" ]] || die "node $i does not run"
    kill_now $pids
    kill_now $(marked_pids "$(node_marker "$i")")
    awk -v i="$i" '!($1 == "node" && $2 == i)' "$STATE" >"$STATE.tmp" && mv "$STATE.tmp" "$STATE"
    echo "local.sh: node $i lost: killed $(echo $pids | wc -w) processes"
}

cmd_add_node() {
    worker_node_index "$@"
    local i="$1" address
    [[ -z "$(marked_pids "$(node_marker "$i")")" ]] || die "node $i already runs"
    address="$(awk '$1 == "address" { print $2 }' "$STATE")"
    # A lost node's session directory still holds its dead sockets: keep its logs aside, start
    # from a clean one.
    rm -rf "$DIR/n$i.lost"
    [[ ! -d "$DIR/n$i" ]] || mv "$DIR/n$i" "$DIR/n$i.lost"
    start_node "$i" "127.0.0.$((10 + i))" "$NUM_CPUS" --address="$address"
}

case "${1:-}" in
up) shift; cmd_up "$@" ;;
status) cmd_status ;;
down) cmd_down ;;
kill) cmd_kill ;;
remove-node) shift; cmd_remove_node "$@" ;;
add-node) shift; cmd_add_node "$@" ;;
-h | --help | help) usage ;;
*) usage >&2; exit 2 ;;
esac
