#!/usr/bin/env bash
# Builds pgvector from Debian trixie's source package against the machine's PostgreSQL server headers.
# Bookworm ships no pgvector binary; the trixie source (0.8.x) builds in seconds. Only run when
# `CREATE EXTENSION vector` fails.
set -euo pipefail
pgmajor=$(ls /etc/postgresql | sort -n | tail -1)
export DEBIAN_FRONTEND=noninteractive
if [ ! -f /etc/apt/sources.list.d/trixie-src.sources ]; then
  # The mirror this machine's apt already uses: the repository names none of its own.
  mirror=$(bash "$(dirname "$0")/debian-mirror.sh")
  cat > /etc/apt/sources.list.d/trixie-src.sources <<SRC
Types: deb-src
URIs: $mirror
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi
apt-get update -qq
apt-get install -y -qq "postgresql-server-dev-$pgmajor" dpkg-dev make gcc >/dev/null
work=$(mktemp -d)
cd "$work"
apt-get source -qq pgvector >/dev/null 2>&1
cd pgvector-*/
make -s PG_CONFIG="/usr/lib/postgresql/$pgmajor/bin/pg_config" >/dev/null
make -s PG_CONFIG="/usr/lib/postgresql/$pgmajor/bin/pg_config" install >/dev/null
rm -rf "$work"
echo "pgvector built and installed for PostgreSQL $pgmajor"
