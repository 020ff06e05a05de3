#!/bin/sh
# gpunex postinst: the system user renters and coordinators run as, and the node's home.
# Honours DPKG_ROOT (an install into another root, as the package's test does).
set -e
root="${DPKG_ROOT:-}"
# The home first: adduser warns about a home it cannot reach.
created=0
if [ ! -d "$root/var/lib/gpunex" ]; then
  install -d -m 0700 "$root/var/lib/gpunex"
  created=1
fi
if ! grep -q '^gpunex:' "$root/etc/passwd" 2>/dev/null; then
  if [ -n "$root" ]; then
    useradd --root "$root" --system --user-group --home-dir /var/lib/gpunex --no-create-home --shell /usr/sbin/nologin gpunex
  else
    adduser --system --group --home /var/lib/gpunex --no-create-home --shell /usr/sbin/nologin gpunex >/dev/null
  fi
fi
if [ "$created" = 1 ]; then
  # Numeric ids: in another root, the user exists only in that root's files.
  uid=$(awk -F: '$1 == "gpunex" { print $3 }' "$root/etc/passwd")
  gid=$(awk -F: '$1 == "gpunex" { print $3 }' "$root/etc/group")
  chown "$uid:$gid" "$root/var/lib/gpunex"
fi
if [ -z "$root" ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload || true
  # An upgrade (configure with the old version): the running node restarts on the new
  # binary (a provider withdraws and announces its offer again).
  if [ "${1:-}" = configure ] && [ -n "${2:-}" ]; then
    for u in gpunex-provider gpunex-renter gpunex-coordinator; do
      systemctl try-restart "$u.service" || true
    done
  fi
fi
exit 0
