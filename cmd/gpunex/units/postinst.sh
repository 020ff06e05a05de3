#!/bin/sh
# gpunex postinst: the system user renters and coordinators run as, and the node's home.
# Honours DPKG_ROOT (an install into another root, as the package's test does).
set -e
root="${DPKG_ROOT:-}"
if ! grep -q '^gpunex:' "$root/etc/passwd" 2>/dev/null; then
  if [ -n "$root" ]; then
    useradd --root "$root" --system --user-group --home-dir /var/lib/gpunex --no-create-home --shell /usr/sbin/nologin gpunex
  else
    adduser --system --group --home /var/lib/gpunex --no-create-home --shell /usr/sbin/nologin gpunex >/dev/null
  fi
fi
if [ ! -d "$root/var/lib/gpunex" ]; then
  # Numeric ids: in another root, the user exists only in that root's files.
  uid=$(awk -F: '$1 == "gpunex" { print $3 }' "$root/etc/passwd")
  gid=$(awk -F: '$1 == "gpunex" { print $3 }' "$root/etc/group")
  install -d -m 0700 -o "$uid" -g "$gid" "$root/var/lib/gpunex"
fi
if [ -z "$root" ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload || true
fi
exit 0
