#!/bin/sh
# Entrypoint of the `postgres` target of services.Containerfile: what docker-compose.yml relies on
# from the official postgres image's entrypoint. As root it owns PGDATA to postgres and runs itself
# again as that user. On the first start of an empty PGDATA it runs initdb (POSTGRES_USER is the
# bootstrap superuser with POSTGRES_PASSWORD; local connections trusted, every other host with a
# scram password), creates POSTGRES_DB, runs /docker-entrypoint-initdb.d/*.sql|*.sh on a server
# reachable only through the socket, stops it and then runs the command (`postgres`) in its place.
set -eu
: "${PGDATA:=/var/lib/postgresql/data}"
export PGDATA

# `podman run image -c shared_buffers=256MB` passes options to postgres, as the official image does.
if [ "${1#-}" != "$1" ]; then set -- postgres "$@"; fi

if [ "$1" = postgres ] && [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA" /var/run/postgresql
  find "$PGDATA" \! -user postgres -exec chown postgres:postgres '{}' +
  chmod 700 "$PGDATA"
  chown postgres:postgres /var/run/postgresql
  chmod 3777 /var/run/postgresql
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

if [ "$1" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
  user=${POSTGRES_USER:-postgres}
  db=${POSTGRES_DB:-$user}
  auth=${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}
  if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "$auth" != trust ]; then
    echo "postgres-entrypoint: the database is uninitialized and POSTGRES_PASSWORD is not set" >&2
    echo "  (set it, or POSTGRES_HOST_AUTH_METHOD=trust to allow every connection without one)" >&2
    exit 1
  fi
  pwfile=$(mktemp)
  printf '%s\n' "${POSTGRES_PASSWORD:-}" > "$pwfile"
  # shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is a list of options, split on purpose
  initdb --username="$user" --pwfile="$pwfile" --auth-local=trust --auth-host=trust \
    --encoding=UTF8 --locale=C.UTF-8 ${POSTGRES_INITDB_ARGS:-}
  rm -f "$pwfile"
  printf '\n# every other host: a password (postgres-entrypoint.sh)\nhost all all all %s\n' "$auth" \
    >> "$PGDATA/pg_hba.conf"

  pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -p 5432" -w start
  if [ "$db" != postgres ]; then
    psql -v ON_ERROR_STOP=1 -q --username="$user" --dbname=postgres -v db="$db" \
      <<'SQL'
create database :"db";
SQL
  fi
  for f in /docker-entrypoint-initdb.d/*; do
    case "$f" in
      *.sql) echo "postgres-entrypoint: running $f"
             psql -v ON_ERROR_STOP=1 -q --username="$user" --dbname="$db" -f "$f" ;;
      *.sh) echo "postgres-entrypoint: running $f"; . "$f" ;;
      *) ;;
    esac
  done
  pg_ctl -D "$PGDATA" -m fast -w stop
  echo "postgres-entrypoint: PostgreSQL init process complete; ready for start up."
fi

exec "$@"
