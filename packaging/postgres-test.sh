#!/usr/bin/env bash
# Run the integration tests against PostgreSQL (`make test-postgres`).
#
# Installs Debian's `postgresql` package when no server is installed, creates a
# throwaway cluster (owned by the `postgres` system user, listening on the
# loopback interface only, on a free port), creates a login role with CREATEDB, runs
# the integration tests with PEERMR_TEST_POSTGRES_URL pointing at it (each
# appliance the tests start gets a fresh database), then drops the cluster.
#
# Arguments replace the default pytest arguments (tests/integration -m "not binary"),
# e.g. packaging/postgres-test.sh tests/integration/test_durability.py -x
# Environment: PEERMR_PG_PORT (default: a free port), PEERMR_PG_KEEP=1 keeps the
# cluster after the run (it is dropped and recreated at the next run anyway).
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON=.venv/bin/python
PYTEST=.venv/bin/pytest
CLUSTER=peermr-test
ROLE=peermr

SUDO=()
[ "$(id -u)" = 0 ] || SUDO=(sudo)

log() { printf '== %s\n' "$*"; }

# Highest PostgreSQL server version installed through Debian's packages.
server_version() {
    local bin versions=()
    for bin in /usr/lib/postgresql/*/bin/postgres; do
        [ -x "$bin" ] && versions+=("$(basename "$(dirname "$(dirname "$bin")")")")
    done
    if [ ${#versions[@]} -gt 0 ]; then
        printf '%s\n' "${versions[@]}" | sort -n | tail -n 1
    fi
}

# Runs a command as the postgres system user (the server never runs as root).
as_postgres() {
    if [ "$(id -u)" = 0 ]; then
        (cd / && runuser -u postgres -- "$@")
    else
        (cd / && sudo -u postgres -- "$@")
    fi
}

if [ ! -x "$PYTEST" ]; then
    echo "$PYTEST not found: run 'make test-postgres' (it installs the virtualenv first)" >&2
    exit 1
fi

if ! command -v pg_ctlcluster >/dev/null 2>&1 || [ -z "$(server_version)" ]; then
    log "installing PostgreSQL (Debian package postgresql)"
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
fi
VERSION=$(server_version)
if [ -z "$VERSION" ]; then
    echo "no PostgreSQL server found under /usr/lib/postgresql after installing postgresql" >&2
    exit 1
fi

# A cluster left over by an interrupted run is dropped: every run starts clean.
drop_cluster() {
    local version name
    while read -r version name _; do
        if [ "$name" = "$CLUSTER" ]; then
            "${SUDO[@]}" pg_dropcluster --stop "$version" "$CLUSTER"
        fi
    done < <(pg_lsclusters --no-header 2>/dev/null || true)
}
drop_cluster

PORT=${PEERMR_PG_PORT:-$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
log "creating PostgreSQL $VERSION cluster $CLUSTER on 127.0.0.1:$PORT"
cleanup() {
    if [ "${PEERMR_PG_KEEP:-}" = 1 ]; then
        log "kept cluster $VERSION/$CLUSTER (pg_dropcluster --stop $VERSION $CLUSTER removes it)"
    else
        drop_cluster
    fi
}
trap cleanup EXIT
# A test cluster: listens on localhost only (the default), no fsync (a crash of the
# machine loses nothing we keep), room for
# the connection pools of several appliances at once.
"${SUDO[@]}" pg_createcluster --quiet --start --start-conf=manual --port "$PORT" --locale C.UTF-8 \
    -o max_connections=300 -o fsync=off -o synchronous_commit=off \
    -o full_page_writes=off \
    "$VERSION" "$CLUSTER" -- --auth-local=peer --auth-host=scram-sha-256 >/dev/null

for _ in $(seq 1 60); do
    pg_isready -q -h 127.0.0.1 -p "$PORT" && break
    sleep 0.5
done
pg_isready -h 127.0.0.1 -p "$PORT" >/dev/null || {
    echo "PostgreSQL did not start; see /var/log/postgresql/postgresql-$VERSION-$CLUSTER.log" >&2
    exit 1
}

PASSWORD=$("$PYTHON" -c 'import secrets; print(secrets.token_hex(16))')
as_postgres psql -X -q -v ON_ERROR_STOP=1 -p "$PORT" -d postgres -v pw="$PASSWORD" <<SQL
CREATE ROLE $ROLE LOGIN CREATEDB PASSWORD :'pw';
SQL

export PEERMR_TEST_POSTGRES_URL="postgresql://$ROLE:$PASSWORD@127.0.0.1:$PORT/postgres"
# The tests choose the database of every appliance they start; an inherited URL must not win.
unset PEERMR_DATABASE_URL

if [ $# -eq 0 ]; then
    set -- tests/integration -m "not binary"
fi
log "running $PYTEST $* against PostgreSQL $VERSION"
start=$SECONDS
status=0
"$PYTEST" "$@" || status=$?
log "pytest exited with $status after $((SECONDS - start))s"
exit "$status"
