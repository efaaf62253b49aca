#!/usr/bin/env bash
# `npm test`: the whole suite, as CI runs it, on SQLite and on PostgreSQL (side by side).
#
# The tests start real servers (OpenLDAP slapd, a Samba AD domain controller, a private dockerd,
# Redis, nginx, Chromium's headless shell, throwaway PostgreSQL clusters, Unbound, Kea DHCPv4,
# containerd, a systemd user manager on a session bus), so on a fresh Debian
# machine this first installs the packages they need with apt-get: run it as root there.
# Already installed, nothing is touched.
#
# PostgreSQL: SERVICE_TEST_DATABASE_URL (a server the suite may create databases on) when set;
# else the machine's server on 127.0.0.1:5432 if it lets `postgres` in without a password
# (started when it is down); else a throwaway cluster of its own on a free port.
#
# One database only, faster while working on something: npm run test:one [-- files...]
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive

say() { printf '\n=== %s\n' "$*"; }

# --- Debian packages the tests use (scripts/test-packages.sh: also run by .ci/run before the type
#     check, whose API document lists containerd's API from the definitions one of them installs)
bash scripts/test-packages.sh
[ "$(id -u)" -eq 0 ] || { echo "the tests run servers as other users (postgres, dockerd): run npm test as root" >&2; exit 1; }

# --- the machine's Redis on 127.0.0.1:6379, started when down (the tests that need Redis start
#     their own on a free port; this one is for running the service by hand next to them)
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  say "starting Redis"
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no --dir /tmp >/dev/null || true
fi

# --- PostgreSQL for the second run
pg_tmp=""
cleanup() {
  if [ -n "${pg_db:-}" ]; then
    for db in "$pg_db" "${pg_db}_migrated"; do psql "$pg_admin_url" -qc "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1 || true; done
  fi
  if [ -n "$pg_tmp" ]; then
    runuser -u postgres -- "$pg_bin/pg_ctl" -D "$pg_tmp/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$pg_tmp"
  fi
}
trap cleanup EXIT
pg_bin="/usr/lib/postgresql/$(ls /usr/lib/postgresql | sort -n | tail -n 1)/bin"
pg_admin_url="${SERVICE_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
if [ -z "${SERVICE_TEST_DATABASE_URL:-}" ]; then
  if ! pg_isready -h 127.0.0.1 -p 5432 -q && ls /etc/postgresql/*/main >/dev/null 2>&1; then
    say "starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -n | tail -n 1)" main start || true
    for _ in $(seq 1 30); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 1; done
  fi
  if ! psql "$pg_admin_url" -qtc 'select 1' >/dev/null 2>&1; then
    say "PostgreSQL on 127.0.0.1:5432 does not let postgres in without a password: a throwaway cluster"
    pg_tmp="$(mktemp -d /tmp/svc-test-pg-XXXXXX)"
    chown postgres: "$pg_tmp"
    port=$(node -e "const s=require('net').createServer().listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})")
    runuser -u postgres -- "$pg_bin/initdb" -D "$pg_tmp/data" -U postgres --auth=trust -E UTF8 --no-sync >/dev/null
    runuser -u postgres -- "$pg_bin/pg_ctl" -D "$pg_tmp/data" -o "-p $port -k $pg_tmp -c listen_addresses=127.0.0.1 -c fsync=off" -l "$pg_tmp/server.log" -w start >/dev/null
    pg_admin_url="postgres://postgres@127.0.0.1:$port/postgres"
  fi
fi

# --- the static checks, before any test: lint (eslint.config.js) and formatting (.prettierrc.json);
#     either one failing fails the run
say "eslint and prettier --check"
node_modules/.bin/eslint .
node_modules/.bin/prettier --check .

# --- the two runs, side by side, each with three mocha workers (the suite is parallel-safe: free
#     ports, temp dirs, a database per service; most of a test's time is waiting on a server).
#     Each run has the files whose imports reach a database; the others (and the browser
#     tests) run once, in whichever run has less to do (scripts/test-files.mjs).
passed=0
failed=0
run_dir="$(mktemp -d /tmp/svc-test-run-XXXXXX)"
trap 'rm -rf "$run_dir"; cleanup' EXIT
suite() {
  local name="$1" files="$2" mode="$3"; shift 3
  local rc=0 began=$SECONDS
  # shellcheck disable=SC2046
  env "$@" node_modules/.bin/mocha --forbid-only --forbid-pending $mode $(node scripts/test-files.mjs "$files") >"$run_dir/$name.out" 2>&1 || rc=$?
  echo "$rc" >"$run_dir/$name.rc"
  echo $((SECONDS - began)) >"$run_dir/$name.secs"
}
tally() {
  local label="$1" name="$2" out rc p f s
  say "tests on $label ($(cat "$run_dir/$name.secs") s)"
  out="$run_dir/$name.out"
  cat "$out"
  rc=$(cat "$run_dir/$name.rc")
  p=$(grep -Eo '^ +[0-9]+ passing' "$out" | tail -n 1 | grep -Eo '[0-9]+' || echo 0)
  f=$(grep -Eo '^ +[0-9]+ failing' "$out" | tail -n 1 | grep -Eo '[0-9]+' || echo 0)
  s=$(grep -Eo '^ +[0-9]+ pending' "$out" | tail -n 1 | grep -Eo '[0-9]+' || echo 0)
  passed=$((passed + p))
  failed=$((failed + f + s))
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && [ "$s" -eq 0 ]; then failed=$((failed + 1)); fi
}

suite_started=$(date +%s)
pg_db="svc_test_$(date +%s)_$$"
psql "$pg_admin_url" -qc "CREATE DATABASE \"$pg_db\"" >/dev/null
# the in-process services start on copies of one migrated database of each kind (test/support/migrated-template.ts)
node --import tsx test/support/migrated-template.ts --postgres "$pg_admin_url" "${pg_db}_migrated" --sqlite "$run_dir/migrated.sqlite"
pg_env=("SERVICE_TEST_DATABASE_URL=${pg_admin_url%/*}/$pg_db" "SERVICE_TEST_MIGRATED_TEMPLATE=${pg_db}_migrated")
sqlite_env=(SERVICE_TEST_DATABASE_URL= "SERVICE_TEST_MIGRATED_SQLITE=$run_dir/migrated.sqlite")
say "tests on SQLite and PostgreSQL, side by side (each printed when all are done)"
started=$(date +%s)
suite sqlite sqlite '--parallel --jobs 3' "${sqlite_env[@]}" &
suite postgres postgres '--parallel --jobs 3' "${pg_env[@]}" &
wait
both=$(( $(date +%s) - started ))
# the files that time the service under a load they make themselves, after the rest
# (scripts/test-files.mjs), one database after the other: besides hashing threads at a lower
# priority, their storms keep an event loop busy (40 addresses guessing), which beside the other
# database's files took a core from the loop those time (262 ms for a 200 ms bound on two cores)
started=$(date +%s)
suite quiet-sqlite quiet '' "${sqlite_env[@]}"
suite quiet-postgres quiet-database '' "${pg_env[@]}"
quiet=$(( $(date +%s) - started ))
tally SQLite sqlite
tally PostgreSQL postgres
tally 'SQLite, after the rest (answer times under load)' quiet-sqlite
tally 'PostgreSQL, after the rest (answer times under load)' quiet-postgres
say "both runs took $both s, then the files timed under load $quiet s; npm test took $(( $(date +%s) - suite_started )) s in all"

echo
echo "${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]
