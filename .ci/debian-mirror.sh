#!/usr/bin/env bash
# Prints the Debian mirror this machine's apt already uses (the first `deb` source of the main
# archive, not the security one), read from /etc/apt/sources.list.d/*.sources (deb822) and
# /etc/apt/sources.list (one-line format). The repository names no mirror host of its own: whatever
# the machine is set up to reach is what the scripts use. Exits 1 when apt names none.
set -euo pipefail
shopt -s nullglob
for f in /etc/apt/sources.list.d/*.sources; do
  # deb822 stanzas: a Types line with `deb`, a URIs line; security archives skipped.
  awk '
    BEGIN { RS = ""; FS = "\n" }
    {
      types = ""; uris = ""
      for (i = 1; i <= NF; i++) {
        if ($i ~ /^Types:/) types = $i
        if ($i ~ /^URIs:/) { uris = $i; sub(/^URIs:[ \t]*/, "", uris) }
      }
      if (types ~ /(^|[ \t])deb([ \t]|$)/ && uris != "") {
        n = split(uris, u, /[ \t]+/)
        for (j = 1; j <= n; j++) if (u[j] ~ /\/debian\/?$/ && u[j] !~ /security/) { print u[j]; exit 0 }
      }
    }' "$f" | head -1 | grep . && exit 0
done
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
  [ -f "$f" ] || continue
  awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i !~ /^\[/ && $i ~ /^[a-z]+:\/\//) { if ($i !~ /security/ && $i ~ /\/debian\/?$/) { print $i; exit 0 } break } }' "$f" | head -1 | grep . && exit 0
done
echo "no Debian mirror in this machine's apt sources" >&2
exit 1
