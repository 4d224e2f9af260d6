#!/bin/sh
# Entrypoint of the `redis` target of services.Containerfile. Like the official redis image, the
# server listens on every interface (Redis' own default without a config file) with protected mode
# off (the official image builds it with that default; here the option is appended unless the
# command sets it), and root hands /data to user redis and runs itself again as that user, so the
# compose command `redis-server --appendonly yes` works unchanged.
set -eu
# `podman run image --maxmemory 1gb` or a config file as the first argument: redis-server options.
if [ "${1#-}" != "$1" ] || [ "${1%.conf}" != "$1" ]; then set -- redis-server "$@"; fi

if [ "$1" = redis-server ]; then
  case " $* " in
    *" --protected-mode "*) ;;
    *) set -- "$@" --protected-mode no ;;
  esac
  if [ "$(id -u)" = 0 ]; then
    find . \! -user redis -exec chown redis:redis '{}' +
    exec setpriv --reuid=redis --regid=redis --init-groups "$0" "$@"
  fi
  # Files the server writes (the appendonly file, dumps) readable by their owner only.
  [ "$(umask)" != 0022 ] || umask 0077
fi

exec "$@"
