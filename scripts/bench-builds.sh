#!/usr/bin/env bash
# The hot path of two builds in one run: a base commit (built in a git worktree beside this
# checkout, with this checkout's node_modules) and this checkout, alternated round by round,
# each round one `npm run bench -- --hot-path-only` per build (the API-key request against bare
# Koa, and the login p99). The machine is noisy: compare the builds within a run, not across runs.
#
#   bash scripts/bench-builds.sh <base commit> [rounds=4] [-- extra bench options]
set -euo pipefail
cd "$(dirname "$0")/.."
base_commit="${1:?usage: bench-builds.sh <base commit> [rounds] [-- bench options]}"
rounds="${2:-4}"
shift $(( $# >= 2 ? 2 : 1 ))
[ "${1:-}" = "--" ] && shift
work="$(mktemp -d)"
cleanup() { git worktree remove --force "$work/base" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
git worktree add --detach "$work/base" "$base_commit" >/dev/null
ln -s "$PWD/node_modules" "$work/base/node_modules"
(cd "$work/base" && node scripts/build.mjs >/dev/null)
node scripts/build.mjs >/dev/null
echo "base $(git rev-parse --short "$base_commit"), head $(git rev-parse --short HEAD), $rounds rounds"
for ((r = 1; r <= rounds; r++)); do
  # which build goes first alternates: the second of two loads in a row meets a warmer machine
  if (( r % 2 )); then order=("base:$work/base" "head:$PWD"); else order=("head:$PWD" "base:$work/base"); fi
  for entry in "${order[@]}"; do
    name="${entry%%:*}"; dir="${entry#*:}"
    node_modules/.bin/tsx scripts/bench.ts --hot-path-only --rounds 2 --service "$dir" "$@" | grep -E '^(api-key|login p99)' | sed "s/^/round $r $name: /"
  done
done
