#!/bin/bash
# A control plane for the remote sandbox provider (src/sandbox/remote.h) that
# places each sandbox's box on this host: `fawn box --listen 127.0.0.1:PORT`
# as a background process. It shows what a docker, kubectl or ssh control
# plane does, and the tests drive it.
#
# usage: loopback-provider.sh create|status|destroy|list
#
# Environment (the provider passes on only what sandbox.remote.env_passthrough
# names: list LOOPBACK_STATE_DIR, FAWN_BIN and the test hooks there):
#   LOOPBACK_STATE_DIR  (required) one directory per sandbox: pid, port, token,
#                       log, user-data/, and "destroying" once destroy ran
#   FAWN_BIN            the fawn binary (create)
#   FAWN_SANDBOX_ID, FAWN_GENERATION   as the provider sets them
# Test hooks (create):
#   LOOPBACK_CREATE_DELAY_S  sleep this long after starting the box
#   LOOPBACK_ENDPOINT        print this endpoint instead of the box's
#
# States: absent (no directory), pending (the box runs but does not answer),
# running (it answers; its generation), terminating (destroy asked it to stop,
# it is still there), stopped (it died without being destroyed).
set -euo pipefail

# Start attempts when the port picked was taken meanwhile.
PORT_ATTEMPTS=5
# Longest waits for a box to listen after its start and to exit after
# destroy's signal: ceilings only a hang reaches (a loaded host, a
# sanitized build), never a time a test measures.
LISTEN_WAIT_S=15
EXIT_WAIT_S=15

die() {
    echo "loopback-provider: $*" >&2
    exit 1
}

state_root=${LOOPBACK_STATE_DIR:?LOOPBACK_STATE_DIR must name the state directory}
[ -d "$state_root" ] || die "no state directory"

sandbox_dir() {
    [[ ${FAWN_SANDBOX_ID:-} =~ ^[0-9a-f]{16}$ ]] || die "FAWN_SANDBOX_ID is not 16 hex digits"
    echo "$state_root/$FAWN_SANDBOX_ID"
}

# "pid starttime" of a live (not zombie) process, for pid files.
proc_id() {
    local stat rest fields
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    rest=${stat##*) }
    read -r -a fields <<<"$rest"
    [ "${fields[0]}" != Z ] || return 1
    echo "$1 ${fields[19]}"
}

# Whether the process recorded in file (pid and start time) still lives.
recorded_alive() {
    local pid start now
    read -r pid start <"$1" 2>/dev/null || return 1
    now=$(proc_id "$pid") || return 1
    [ "$now" = "$pid $start" ]
}

# The box process runs the sandbox as a child of the `fawn box` process;
# recording it lets destroy reach it if its parent was killed.
record_box_pid() {
    local dir=$1 outer child id
    [ -e "$dir/box.pid" ] && return 0
    read -r outer _ <"$dir/pid"
    child=$(cat "/proc/$outer/task/$outer/children" 2>/dev/null) || return 0
    child=${child%% *}
    if [ -n "$child" ] && id=$(proc_id "$child"); then
        echo "$id" >"$dir/box.pid"
    fi
}

alive() {
    recorded_alive "$1/pid" || recorded_alive "$1/box.pid"
}

# The generation the box's log announced ("" before it was ready).
logged_generation() {
    grep -o 'generation [0-9a-f]\{32\}' "$1/log" 2>/dev/null | tail -n 1 | cut -d' ' -f2 || true
}

# The generation the box answers with right now, or failure.
answered_generation() {
    local dir=$1 reply
    # shellcheck disable=SC2016 # expanded by the inner shell, from its environment
    reply=$(PORT=$(cat "$dir/port") TOKEN=$(cat "$dir/token") timeout 1 bash -c '
        exec 3<>"/dev/tcp/127.0.0.1/$PORT" || exit 1
        printf "GET /v1/sandbox HTTP/1.1\r\nHost: box\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n" "$TOKEN" >&3
        cat <&3' 2>/dev/null) || return 1
    [[ $reply == "HTTP/1.1 200 "* ]] || return 1
    grep -o '"generation": *"[0-9a-f]\{32\}"' <<<"$reply" | grep -o '[0-9a-f]\{32\}'
}

# Prints "STATE GENERATION" for dir; forgets a destroyed box once it is gone.
state_of() {
    local dir=$1 gen
    if [ ! -d "$dir" ]; then
        echo "absent -"
    elif [ -e "$dir/destroying" ]; then
        if alive "$dir"; then echo "terminating $(logged_generation "$dir")"; else
            rm -rf "$dir"
            echo "absent -"
        fi
    elif alive "$dir"; then
        record_box_pid "$dir"
        if gen=$(answered_generation "$dir"); then echo "running $gen"; else
            echo "pending $(logged_generation "$dir")"
        fi
    else
        echo "stopped $(logged_generation "$dir")"
    fi
}

port_in_use() {
    local hex
    hex=$(printf ':%04X ' "$1")
    grep -q "$hex" /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# Whether process $2 holds the socket listening on 127.0.0.1:$1 (another
# process may have taken the port before the box could bind it).
listening() {
    local inode fd
    inode=$(awk -v local="$(printf '0100007F:%04X' "$1")" \
        '$2 == local && $4 == "0A" { print $10; exit }' /proc/net/tcp)
    [ -n "$inode" ] || return 1
    for fd in /proc/"$2"/fd/*; do
        [ "$(readlink "$fd" 2>/dev/null)" = "socket:[$inode]" ] && return 0
    done
    return 1
}

# Starts the box on a free port; waits until it listens (or died).
start_box() {
    local dir=$1 port pid until
    for ((attempt = 0; attempt < PORT_ATTEMPTS; attempt++)); do
        port=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
        port_in_use "$port" && continue
        echo "$port" >"$dir/port"
        # The gateway's view of the user's skills is on this host: shown as is.
        setsid "$FAWN_BIN" box --listen "127.0.0.1:$port" --token-file "$dir/token" \
            --user-data "$dir/user-data" ${FAWN_SKILLS_DIR:+--skills-dir "$FAWN_SKILLS_DIR"} \
            </dev/null >>"$dir/log" 2>&1 &
        pid=$!
        proc_id "$pid" >"$dir/pid" || continue
        until=$((SECONDS + LISTEN_WAIT_S))
        while ((SECONDS < until)); do
            listening "$port" "$pid" && return 0
            recorded_alive "$dir/pid" || break
            sleep 0.02
        done
        kill -KILL "$pid" 2>/dev/null || true
    done
    return 1
}

cmd_create() {
    local dir token
    dir=$(sandbox_dir)
    [ -x "${FAWN_BIN:-}" ] || die "FAWN_BIN must name the fawn binary"
    if [ -d "$dir" ] && [ ! -e "$dir/destroying" ] && alive "$dir"; then
        token=$(cat "$dir/token")
    else
        rm -rf "$dir"
        mkdir -p "$dir/user-data"
        token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
        (umask 077 && printf '%s\n' "$token" >"$dir/token")
        start_box "$dir" || die "the box did not start (see $dir/log)"
    fi
    sleep "${LOOPBACK_CREATE_DELAY_S:-0}"
    printf '{"endpoint": "%s", "token": "%s"}\n' \
        "${LOOPBACK_ENDPOINT:-tcp:127.0.0.1:$(cat "$dir/port")}" "$token"
}

cmd_status() {
    local state gen
    read -r state gen <<<"$(state_of "$(sandbox_dir)")"
    if [ "$gen" = - ] || [ -z "$gen" ]; then
        printf '{"state": "%s"}\n' "$state"
    else
        printf '{"state": "%s", "generation": "%s"}\n' "$state" "$gen"
    fi
}

cmd_destroy() {
    local dir known outer box until
    dir=$(sandbox_dir)
    if [ -d "$dir" ]; then
        known=$(logged_generation "$dir")
        if [ -n "${FAWN_GENERATION:-}" ] && [ -n "$known" ] && [ "$known" != "$FAWN_GENERATION" ]; then
            echo '{}' # another generation runs: the one named is gone already
            return
        fi
        touch "$dir/destroying"
        recorded_alive "$dir/pid" && record_box_pid "$dir"
        if recorded_alive "$dir/pid"; then
            read -r outer _ <"$dir/pid"
            kill -TERM "$outer" 2>/dev/null || true
        elif recorded_alive "$dir/box.pid"; then # its parent was killed: nothing forwards SIGTERM
            read -r box _ <"$dir/box.pid"
            kill -KILL "$box" 2>/dev/null || true
        fi
        until=$((SECONDS + EXIT_WAIT_S))
        while ((SECONDS < until)) && alive "$dir"; do
            sleep 0.02
        done
        alive "$dir" || rm -rf "$dir"
    fi
    echo '{}'
}

cmd_list() {
    local dir state gen sep=""
    printf '{"sandboxes": ['
    for dir in "$state_root"/*/; do
        [ -d "$dir" ] || continue
        dir=${dir%/}
        read -r state gen <<<"$(state_of "$dir")"
        [ "$state" = absent ] && continue
        [ "$gen" = - ] && gen=""
        printf '%s{"sandbox_id": "%s", "generation": "%s"}' "$sep" "${dir##*/}" "$gen"
        sep=", "
    done
    printf ']}\n'
}

case "${1:-}" in
create) cmd_create ;;
status) cmd_status ;;
destroy) cmd_destroy ;;
list) cmd_list ;;
*) die "usage: loopback-provider.sh create|status|destroy|list" ;;
esac
