#!/bin/sh
# The official image's contract: POSTGRES_PASSWORD (required), POSTGRES_USER (the superuser) and POSTGRES_DB
# made at the first start, in $PGDATA; password logins from anywhere; the server runs as `postgres`.
set -eu
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required}"
user=${POSTGRES_USER:-postgres}
db=${POSTGRES_DB:-$user}
bin=/usr/lib/postgresql/15/bin
as_postgres() { setpriv --reuid postgres --regid postgres --init-groups "$@"; }
install -d -o postgres -g postgres -m 0700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pwfile=$(mktemp) && chown postgres "$pwfile" && printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  as_postgres "$bin/initdb" -D "$PGDATA" -U "$user" --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  if [ "$db" != postgres ]; then
    echo "CREATE DATABASE \"$db\" OWNER \"$user\";" | as_postgres "$bin/postgres" --single -D "$PGDATA" postgres >/dev/null
  fi
fi
exec setpriv --reuid postgres --regid postgres --init-groups "$bin/postgres" -D "$PGDATA" -c listen_addresses='*'
