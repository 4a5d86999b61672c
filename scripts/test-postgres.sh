#!/usr/bin/env bash
# Starts a throwaway Postgres server for the test suite (Debian's postgresql package): its own cluster
# in the cache dir, loopback only, its own port. Idempotent. Prints the URL on stdout as its last line.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"

port=${TEST_POSTGRES_PORT:-54329}
bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
if [ -z "$bindir" ]; then
  say "installing postgresql (apt-get)" >&2
  apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
  bindir=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
fi
# Outside $HOME: the postgres user cannot enter /root.
data="/var/cache/agent-sandbox-tests/postgres-$(basename "$(dirname "$bindir")")"
if [ ! -f "$data/PG_VERSION" ]; then
  mkdir -p "$data" && chown postgres:postgres "$data"
  runuser -u postgres -- "$bindir/initdb" -D "$data" -A trust -U postgres >/dev/null
fi
if ! runuser -u postgres -- "$bindir/pg_ctl" -D "$data" status >/dev/null 2>&1; then
  # The server outlives this script: it must not keep the caller's other descriptors open (a `flock` on the
  # test lock around `npm test` would be held for as long as Postgres runs).
  (
    for fd in /proc/self/fd/*; do
      n=${fd##*/}
      if [ "$n" -gt 2 ] && [ "$n" -lt 255 ]; then eval "exec $n>&-"; fi
    done 2>/dev/null
    runuser -u postgres -- "$bindir/pg_ctl" -D "$data" -l "$data/server.log" -w start \
      -o "-p $port -k /tmp -c listen_addresses=127.0.0.1 -c fsync=off" >&2
  ) || die "Postgres did not start; see $data/server.log"
fi
echo "postgres://postgres@127.0.0.1:$port/postgres"
