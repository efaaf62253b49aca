#!/usr/bin/env bash
# The Debian packages the tests use, installed with apt-get when missing (as root); nothing is
# touched when they are there. Run by `npm test` (scripts/test.sh) and by .ci/run before the type
# check: the API document (scripts/api-types.ts) lists containerd's API from the definitions
# golang-github-containerd-containerd-dev installs.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

PACKAGES=(slapd ldap-utils samba docker.io busybox-static chromium-headless-shell redis-server nginx postgresql postgresql-client
  unbound kea-dhcp4-server containerd golang-github-containerd-containerd-dev systemd dbus-daemon util-linux caddy)
missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "the tests need these Debian packages: ${missing[*]}; run npm test as root (it installs them) or install them" >&2
    exit 1
  fi
  printf '\n=== %s\n' "apt-get install ${missing[*]}"
  apt-get update -qq
  apt-get install -y -q "${missing[@]}" >/dev/null
fi
