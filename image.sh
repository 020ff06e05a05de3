#!/bin/sh
# The OCI image of the gpunex node, for renters, coordinators and auditors (`make image`).
#
# Built without a container daemon: the image is one layer holding the static binary, a CA
# bundle (coordinators reach Solana RPC over HTTPS), /etc/passwd and /etc/group with the
# unprivileged user gpunex (65532), /tmp, and the node's home volume /var/lib/gpunex. This
# script writes the layer with tar, then the OCI config, manifest and index by hand, and packs
# them as an OCI image layout archive: `podman load`, `skopeo copy oci-archive:…`,
# `ctr images import` and Docker 25 or later read it. The same inputs (the binary, and the
# build host's CA bundle) give the same image, byte for byte (SOURCE_DATE_EPOCH, sorted names,
# fixed owners and modes).
#
# A provider runs the Debian package instead: its jobs need the host's containerd, runc and
# GPUs, which a container would only reach by giving the container all of the host.
#
# Usage: image.sh BINARY VERSION ARCH OUT.tar
#   BINARY   a statically linked gpunex (CGO_ENABLED=0)
#   VERSION  the image's tag ('+' becomes '-', which tags do not allow)
#   ARCH     amd64 or arm64
set -eu
umask 022

[ $# -eq 4 ] || { echo "usage: $0 BINARY VERSION ARCH OUT.tar" >&2; exit 2; }
binary=$1 version=$2 arch=$3 out=$4
tag=$(printf '%s' "$version" | tr '+' '-')
name="docker.io/gpunex/gpunex:$tag"
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
cabundle=/etc/ssl/certs/ca-certificates.crt

if grep -qa 'ld-linux' "$binary"; then
	echo "$binary is not statically linked: build it with CGO_ENABLED=0" >&2
	exit 1
fi
[ -r "$cabundle" ] || { echo "$cabundle missing: apt-get install ca-certificates" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/rootfs
mkdir -p "$root/usr/bin" "$root/etc/ssl/certs" "$root/tmp" "$root/var/lib/gpunex"
cp "$binary" "$root/usr/bin/gpunex"
chmod 0755 "$root/usr/bin/gpunex"
cp "$cabundle" "$root/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\ngpunex:x:65532:65532:gpunex node:/var/lib/gpunex:/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\ngpunex:x:65532:\n' >"$root/etc/group"
chmod 1777 "$root/tmp"
chmod 0700 "$root/var/lib/gpunex"

# The layer: everything owned by root, but the home, which belongs to gpunex.
blobs=$work/layout/blobs/sha256
mkdir -p "$blobs"
tarflags="--sort=name --mtime=@$epoch --numeric-owner --format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime"
# shellcheck disable=SC2086
tar $tarflags --owner=0 --group=0 --exclude=./var/lib/gpunex -C "$root" -cf "$work/layer.tar" .
# shellcheck disable=SC2086
tar $tarflags --owner=65532 --group=65532 --no-recursion -C "$root" -rf "$work/layer.tar" ./var/lib/gpunex
diffid=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
gzip -9 -n -c "$work/layer.tar" >"$work/layer.tar.gz"
layer=$(sha256sum "$work/layer.tar.gz" | cut -d' ' -f1)
layersize=$(stat -c %s "$work/layer.tar.gz")
mv "$work/layer.tar.gz" "$blobs/$layer"

# blob FILE: stores FILE under its digest and prints "DIGEST SIZE".
blob() {
	d=$(sha256sum "$1" | cut -d' ' -f1)
	s=$(stat -c %s "$1")
	mv "$1" "$blobs/$d"
	echo "$d $s"
}

cat >"$work/config.json" <<EOF
{"created":"$created","architecture":"$arch","os":"linux","config":{"User":"65532:65532","Env":["PATH=/usr/bin","HOME=/var/lib/gpunex","GPUNEX_HOME=/var/lib/gpunex/home"],"Entrypoint":["/usr/bin/gpunex"],"Cmd":["node","run"],"WorkingDir":"/var/lib/gpunex","Volumes":{"/var/lib/gpunex":{}},"ExposedPorts":{"4001/tcp":{},"4001/udp":{}},"Labels":{"org.opencontainers.image.title":"gpunex","org.opencontainers.image.version":"$version","org.opencontainers.image.source":"https://github.com/gpunex/gpunex"}},"rootfs":{"type":"layers","diff_ids":["sha256:$diffid"]},"history":[{"created":"$created","created_by":"image.sh: the static gpunex binary, CA bundle, gpunex user, /tmp, /var/lib/gpunex"}]}
EOF
set -- $(blob "$work/config.json")
config=$1 configsize=$2

cat >"$work/manifest.json" <<EOF
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:$config","size":$configsize},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:$layer","size":$layersize}],"annotations":{"org.opencontainers.image.created":"$created","org.opencontainers.image.version":"$version"}}
EOF
set -- $(blob "$work/manifest.json")
manifest=$1 manifestsize=$2

printf '{"imageLayoutVersion":"1.0.0"}' >"$work/layout/oci-layout"
cat >"$work/layout/index.json" <<EOF
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:$manifest","size":$manifestsize,"platform":{"architecture":"$arch","os":"linux"},"annotations":{"io.containerd.image.name":"$name","org.opencontainers.image.ref.name":"$tag"}}]}
EOF
mkdir -p "$(dirname "$out")"
# shellcheck disable=SC2086
tar $tarflags --owner=0 --group=0 -C "$work/layout" -cf "$out" oci-layout index.json blobs
echo "$out: $name (manifest sha256:$manifest, layer $(($layersize / 1024)) KiB)"
