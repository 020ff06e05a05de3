#!/bin/sh
# gpunex installer for Debian and Ubuntu hosts: the package, what the role needs, the node's
# home, the service, and the doctor's check. docs/operations.md, "Install".
#
#   sudo ./install.sh --role provider --package gpunex_X_amd64.deb [--sha256 HEX] [--bootstrap ADDR] [--region R] [--listen ADDRS] [--yes]
#   sudo ./install.sh --role provider --dry-run     # say what would change, change nothing
#   sudo ./install.sh --uninstall                    # stop and remove the service and the package (the home stays)
#
# It says what it will change before it changes anything, and is safe to run again: what is
# in place already is left as it is. The package is the one named by --package, never one
# found in the current folder, and it must not be writable by others than its owner; with
# --sha256 its digest is checked before it is installed. Commands can be replaced for tests: APT_GET, DPKG,
# SYSTEMCTL, GPUNEX (the installed binary), and ROOT (a throwaway root the files live under).
set -eu

ROOT="${ROOT:-}"
APT_GET="${APT_GET:-apt-get}"
DPKG="${DPKG:-dpkg}"
SYSTEMCTL="${SYSTEMCTL:-systemctl}"
GPUNEX="${GPUNEX:-$ROOT/usr/bin/gpunex}"
HOME_DIR="$ROOT/var/lib/gpunex"

role="" package="" sha256="" bootstrap="" region="" listen="" yes=0 dry=0 uninstall=0
while [ $# -gt 0 ]; do
  case "$1" in
    --role) role="$2"; shift 2 ;;
    --package) package="$2"; shift 2 ;;
    --sha256) sha256="$2"; shift 2 ;;
    --bootstrap) bootstrap="$2"; shift 2 ;;
    --region) region="$2"; shift 2 ;;
    --listen) listen="$2"; shift 2 ;;
    --yes|-y) yes=1; shift ;;
    --dry-run) dry=1; shift ;;
    --uninstall) uninstall=1; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

say() { printf '%s\n' "$*"; }
cdi_spec() { ls "$ROOT"/etc/cdi/*.yaml "$ROOT"/etc/cdi/*.json "$ROOT"/var/run/cdi/*.yaml "$ROOT"/var/run/cdi/*.json >/dev/null 2>&1; }
die() { printf 'install.sh: %s\n' "$*" >&2; exit 1; }

if [ "$uninstall" = 1 ]; then
  say "This removes the gpunex services and package. The home $HOME_DIR (identity, ledger) stays."
  [ "$dry" = 1 ] && exit 0
  for u in gpunex-provider gpunex-renter gpunex-coordinator; do
    $SYSTEMCTL disable --now "$u.service" >/dev/null 2>&1 || true
  done
  $DPKG --remove gpunex
  say "removed; delete $HOME_DIR yourself to forget this node's identity and ledger"
  exit 0
fi

case "$role" in
  provider|renter|coordinator) ;;
  *) die "--role provider, renter or coordinator" ;;
esac
[ "$dry" = 1 ] || [ "$(id -u)" = 0 ] || [ -n "$ROOT" ] || die "run as root (sudo), or with --dry-run"

# The plan: what is missing, and what will be done about it.
plan=""
add() { plan="$plan
  - $*"; }
need_pkgs=""
if [ "$role" = provider ]; then
  for p in containerd runc containernetworking-plugins iptables; do
    $DPKG --status "$p" >/dev/null 2>&1 || need_pkgs="$need_pkgs $p"
  done
  [ -n "$need_pkgs" ] && add "install$need_pkgs (apt-get): jobs run through them"
fi
if [ ! -x "$GPUNEX" ]; then
  # Never a package found in the current folder: in a shared folder, another user could
  # have put a newer one there, and it would be installed as root.
  [ -n "$package" ] || die "gpunex is not installed and no package was given: --package gpunex_VERSION_ARCH.deb"
  [ -f "$package" ] || die "--package $package: no such file"
  case "$(stat -c %A "$package")" in
    ?????w????|????????w?) die "--package $package is writable by users other than its owner: anyone of them could have changed it; copy it to a folder only you can write, chmod go-w it, and check its digest (--sha256)" ;;
  esac
  if [ -n "$sha256" ]; then
    got=$(sha256sum "$package" | cut -d' ' -f1)
    [ "$got" = "$sha256" ] || die "--package $package has SHA-256 $got, not the $sha256 given: not installed"
  fi
  add "install the package $package"
fi
if [ ! -f "$HOME_DIR/identity.key" ]; then
  add "create the $role node's home $HOME_DIR (gpunex init)"
fi
unit="gpunex-$role.service"
for other in gpunex-provider gpunex-renter gpunex-coordinator gpunex; do
  if [ "$other.service" != "$unit" ] && $SYSTEMCTL is-enabled "$other.service" >/dev/null 2>&1; then
    die "$other.service is enabled: one node per host and home; uninstall it first (install.sh --uninstall)"
  fi
done
if ! $SYSTEMCTL is-enabled "$unit" >/dev/null 2>&1; then
  add "enable and start $unit"
fi
gpu_note=""
if [ "$role" = provider ]; then
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    gpu_note="no NVIDIA driver found (nvidia-smi): install it (apt-get install nvidia-driver) and reboot, or declare simulated GPUs"
  elif ! cdi_spec; then
    if command -v nvidia-ctk >/dev/null 2>&1; then
      add "generate the GPUs' CDI spec (nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml)"
    else
      gpu_note="no CDI spec and no NVIDIA Container Toolkit (nvidia-ctk): install it so that jobs get their GPUs"
    fi
  fi
fi

if [ -z "$plan" ]; then
  say "gpunex $role: everything is in place already"
else
  say "gpunex $role: this will$plan"
fi
[ -n "$gpu_note" ] && say "note: $gpu_note"
[ "$dry" = 1 ] && exit 0
if [ -n "$plan" ] && [ "$yes" != 1 ]; then
  printf 'Go ahead? [y/N] '
  read -r answer
  case "$answer" in y|Y|yes) ;; *) say "nothing changed"; exit 1 ;; esac
fi

start=$(date +%s)
if [ -n "$need_pkgs" ]; then
  # Cloud images often ship without package lists. A repository that fails to update (an
  # expired key on a vendor repository) need not stop the install: the lists at hand may do.
  $APT_GET update -q || say "warning: apt-get update failed; installing from the package lists at hand"
  DEBIAN_FRONTEND=noninteractive $APT_GET install -y -q --no-install-recommends -o Acquire::Retries=3 $need_pkgs
fi
if [ ! -x "$GPUNEX" ]; then
  $DPKG --install "$package"
fi
if [ "$role" = provider ] && command -v nvidia-smi >/dev/null 2>&1 && command -v nvidia-ctk >/dev/null 2>&1 && ! cdi_spec; then
  nvidia-ctk cdi generate --output="$ROOT/etc/cdi/nvidia.yaml" || say "warning: nvidia-ctk cdi generate failed: jobs get no GPU until a CDI spec exists (gpunex doctor)"
fi
if [ ! -f "$HOME_DIR/identity.key" ]; then
  set -- init --home "$HOME_DIR" --role "$role"
  [ -n "$bootstrap" ] && set -- "$@" --bootstrap "$bootstrap"
  [ -n "$region" ] && set -- "$@" --region "$region"
  [ -n "$listen" ] && set -- "$@" --listen "$listen"
  # A provider runs as root; a renter or coordinator as the gpunex user, who owns its home.
  if [ "$role" = provider ] || [ -n "$ROOT" ]; then
    "$GPUNEX" "$@" >/dev/null
  else
    runuser -u gpunex -- "$GPUNEX" "$@" >/dev/null
  fi
fi
if ! $SYSTEMCTL is-enabled "$unit" >/dev/null 2>&1; then
  $SYSTEMCTL enable --now "$unit"
fi
# The doctor checks the running node: give the service time to start (Type=simple units are
# active as soon as their process is).
if $SYSTEMCTL is-active "$unit" >/dev/null 2>&1; then
  waited=0
  until "$GPUNEX" status --home "$HOME_DIR" >/dev/null 2>&1; do
    if [ "$waited" -ge 60 ]; then
      say "warning: the node did not answer within 60 s; see journalctl -u $unit"
      break
    fi
    sleep 1
    waited=$((waited + 1))
  done
fi
say "installed in $(( $(date +%s) - start )) s"

say "doctor:"
"$GPUNEX" doctor --home "$HOME_DIR" || true
case "$role" in
  provider) say "next: describe your GPUs, prices and region in $HOME_DIR/config.toml, restart ($SYSTEMCTL restart $unit), then apply: gpunex apply --home $HOME_DIR" ;;
  renter) say "next: deposit and rent: gpunex wallet init --home $HOME_DIR, then gpunex offers search --home $HOME_DIR" ;;
  coordinator) say "next: set [settlement] in $HOME_DIR/config.toml, restart ($SYSTEMCTL restart $unit), then review applications: gpunex coordinator applications list --home $HOME_DIR" ;;
esac
# The login link opens the node's dashboard: it goes to a terminal only, never to a log
# (cloud-init, CI) that others may read.
if [ ! -t 1 ]; then
  say "dashboard: run gpunex dashboard --home $HOME_DIR in a terminal for a one-time login link (not printed here: this output is not a terminal, and may be kept in a log)"
elif link=$("$GPUNEX" dashboard --home "$HOME_DIR" 2>/dev/null); then
  say "dashboard: $link (opens once, within 5 minutes; a new link: gpunex dashboard --home $HOME_DIR; from another machine: ssh -L PORT:127.0.0.1:PORT, PORT from the link)"
else
  say "dashboard: gpunex dashboard --home $HOME_DIR prints a one-time login link to this node's web dashboard once it runs"
fi
