# Sourced by .ci/run: a throwaway PostgreSQL server on loopback for the catalog tests.
# Installs Debian's postgresql if it is missing, starts a temporary cluster (as the postgres
# user when run as root) on a free port, creates a role that may create databases, exports
# QUADRAT_TEST_POSTGRES_URL, and stops and removes the cluster when the calling shell exits.
# Works beside a system server that is already installed or running (another port, own data).

ci_pg_bin() {
    ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}

if [ -z "$(ci_pg_bin)" ]; then
    echo "ci: installing postgresql" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq </dev/null
    apt-get install -y -qq --no-install-recommends postgresql </dev/null >/dev/null
fi
CI_PG_BIN="$(ci_pg_bin)"
if [ -z "$CI_PG_BIN" ]; then
    echo "ci: no PostgreSQL server binaries found under /usr/lib/postgresql" >&2
    exit 1
fi

CI_PG_DIR="$(mktemp -d /tmp/quadrat-ci-pg.XXXXXX)"
CI_PG_PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
CI_PG_PASSWORD="$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
if [ "$(id -u)" = 0 ]; then
    chown postgres: "$CI_PG_DIR"
    ci_pg() { (cd / && runuser -u postgres -- "$@"); }  # cwd may be unreadable to it
else
    ci_pg() { "$@"; }
fi

ci_pg_stop() {
    ci_pg "$CI_PG_BIN/pg_ctl" -D "$CI_PG_DIR/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$CI_PG_DIR"
}
trap ci_pg_stop EXIT

# Durability is not under test here: no fsync makes the cluster start and the tests faster.
# Autovacuum is off and the role may signal other backends: an autovacuum worker that had just
# entered a test's database made its DROP DATABASE ... WITH (FORCE) fail ("must be a member of
# the role whose process is being terminated") on a loaded machine.
ci_pg "$CI_PG_BIN/initdb" -D "$CI_PG_DIR/data" -U postgres -E UTF8 --no-locale \
    --auth-local=trust --auth-host=scram-sha-256 >/dev/null </dev/null
ci_pg "$CI_PG_BIN/pg_ctl" -D "$CI_PG_DIR/data" -l "$CI_PG_DIR/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $CI_PG_PORT -k $CI_PG_DIR -c fsync=off -c autovacuum=off -c max_connections=200" \
    start >/dev/null </dev/null
ci_pg "$CI_PG_BIN/psql" -h "$CI_PG_DIR" -p "$CI_PG_PORT" -U postgres -d postgres -q -v ON_ERROR_STOP=1 \
    -c "CREATE ROLE quadrat_ci LOGIN CREATEDB PASSWORD '$CI_PG_PASSWORD'" \
    -c "GRANT pg_signal_backend TO quadrat_ci" \
    -c "CREATE DATABASE quadrat_ci OWNER quadrat_ci" </dev/null
export QUADRAT_TEST_POSTGRES_URL="postgresql://quadrat_ci:$CI_PG_PASSWORD@127.0.0.1:$CI_PG_PORT/quadrat_ci"
echo "ci: PostgreSQL $("$CI_PG_BIN/postgres" -V | awk '{print $3}') on 127.0.0.1:$CI_PG_PORT for the catalog tests" >&2
