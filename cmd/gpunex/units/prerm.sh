#!/bin/sh
# gpunex prerm: stop the node before its binary goes (a provider withdraws its offer). On an
# upgrade the node keeps running: postinst restarts it on the new binary.
set -e
if [ "${1:-}" = upgrade ]; then
  exit 0
fi
if [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then
  for u in gpunex-provider gpunex-renter gpunex-coordinator; do
    systemctl stop "$u.service" 2>/dev/null || true
  done
fi
exit 0
