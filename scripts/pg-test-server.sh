#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests, from Debian's postgresql
# package: a new cluster in a temporary directory, listening only on a unix
# socket in that directory (no TCP), stopped and removed afterwards.
#
#   scripts/pg-test-server.sh run COMMAND [ARGS...]
#
# starts the server, runs COMMAND with FAWN_TEST_PG set to a libpq
# conninfo for it (without dbname: each test creates its own database, so
# tests may run in parallel), then stops the server and answers COMMAND's
# exit status. As root the server runs as an unprivileged user (nobody:
# PostgreSQL refuses root), owning the directory; clients connect as the
# cluster's superuser "fawn" over the socket (trust authentication: only
# the directory's users reach the socket).
set -euo pipefail

PG_BIN=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
[ -x "$PG_BIN/initdb" ] || { echo "pg-test-server: no PostgreSQL server (apt-get install postgresql)" >&2; exit 1; }
[ "${1:-}" = run ] && [ $# -ge 2 ] || { echo "usage: $0 run COMMAND [ARGS...]" >&2; exit 2; }
shift

dir=$(mktemp -d /tmp/fawn-pg-XXXXXX)
as=()
if [ "$(id -u)" = 0 ]; then
    chown nobody: "$dir"
    chmod 0711 "$dir"
    as=(runuser -u nobody --)
fi

stop() {
    "${as[@]}" "$PG_BIN/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap stop EXIT

"${as[@]}" "$PG_BIN/initdb" -D "$dir/data" -U fawn --auth=trust -E UTF8 --locale=C.UTF-8 \
    --no-sync >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
# No TCP; the socket in the directory; enough connections for parallel
# tests (each store holds a few); fsync off (a test cluster is thrown away).
"${as[@]}" "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-c listen_addresses='' -k $dir -c max_connections=300 -c fsync=off \
        -c synchronous_commit=off -c full_page_writes=off" start >/dev/null ||
    { cat "$dir/server.log" >&2; exit 1; }

export FAWN_TEST_PG="host=$dir user=fawn"
set +e
"$@"
status=$?
set -e
exit $status
