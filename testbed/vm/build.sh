#!/usr/bin/env bash
# Builds the VM lab's guest image from Debian's packages only, into OUT:
#   vmlinuz      trixie-backports' cloud kernel (or the kernel of KERNEL_DEB)
#   initrd.gz    busybox and sshd from this machine; tc and ip of forky's iproute2 7.2
#                (the first tc that knows dualpi2), bookworm's ethtool 6.1 and dash,
#                all four built statically from Debian's sources; the kernel's
#                network modules and sch_dualpi2.ko built out of tree against the
#                kernel's headers (no Debian kernel enables dualpi2)
#   kver         the kernel release
#   sch_dualpi2.ko the module built for it (also inside initrd.gz), for --module
# Other suites are read through a private APT_CONFIG from the mirror the machine's
# apt already uses; the machine's apt setup is never changed.
# Usage (root): INIT=init build.sh OUT [KERNEL_DEB]
set -euo pipefail
out=$1
kdeb=${2:-}
: "${INIT:?INIT must name the init script of the guest}"
INIT=$(realpath "$INIT")
[ -z "$kdeb" ] || kdeb=$(realpath "$kdeb")
kv=7.3.4+deb13-cloud-amd64
work=$(mktemp -d "${TMPDIR:-/tmp}/bbvm-build.XXXXXX")
cleanup() {
  mountpoint -q "$work/trixie/proc" 2>/dev/null && umount "$work/trixie/proc"
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
cd "$work"
step() { echo "vm build: $*" >&2; }

mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
[ -n "$mirror" ] || mirror=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
[ -n "$mirror" ] || { echo "no Debian mirror in /etc/apt/sources.list{,.d}: the VM lab is built from Debian's packages" >&2; exit 1; }
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$keyring" ] || { echo "$keyring missing: apt-get install debian-archive-keyring" >&2; exit 1; }

step "private apt for trixie, trixie-backports and forky"
mkdir -p apt/{lists/partial,archives/partial,etc/sources.list.d,etc/preferences.d}
touch apt/status
{
  for s in trixie trixie-backports forky; do echo "deb [signed-by=$keyring] $mirror $s main"; done
  # The userland's sources (below).
  for s in forky bookworm; do echo "deb-src [signed-by=$keyring] $mirror $s main"; done
} > apt/etc/sources.list
cat > apt/apt.conf <<CONF
Dir::State "$work/apt"; Dir::State::status "$work/apt/status"; Dir::Cache "$work/apt";
Dir::Etc::sourcelist "$work/apt/etc/sources.list"; Dir::Etc::sourceparts "$work/apt/etc/sources.list.d";
Dir::Etc::preferencesparts "$work/apt/etc/preferences.d"; APT::Architecture "amd64";
APT::Sandbox::User "root";
CONF
papt() { APT_CONFIG="$work/apt/apt.conf" "$@"; }
papt apt-get update -qq

r=$work/root
mkdir -p "$r"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,run,tmp,opt,root,etc/ssh,var/empty}

if [ -n "$kdeb" ]; then
  step "kernel from $kdeb"
  dpkg-deb -x "$kdeb" k
  kv=$(ls k/lib/modules 2>/dev/null || ls k/usr/lib/modules)
  dualpi2=no
else
  step "kernel $kv, its headers and sources"
  papt apt-get download -qq "linux-binary-unsigned-$kv" "linux-modules-$kv" "linux-headers-$kv" \
    linux-headers-7.3.4+deb13-common linux-kbuild-7.3.4+deb13 linux-source-7.3
  for d in linux-binary-unsigned-*.deb linux-modules-*.deb; do dpkg-deb -x "$d" k; done
  dualpi2=yes
fi
mdir=k/lib/modules/$kv
[ -d "$mdir" ] || mdir=k/usr/lib/modules/$kv
vmlinuz=
for f in "$mdir"/vmlinuz* k/boot/vmlinuz-"$kv"; do [ -f "$f" ] && vmlinuz=$f && break; done
[ -n "$vmlinuz" ] || { echo "no vmlinuz for $kv in the kernel package" >&2; exit 1; }

step "a trixie chroot to build in"
debootstrap --variant=minbase \
  --include=gcc-14,make,binutils,libc6-dev,libelf1t64,bison,flex,pkg-config,libmnl-dev,autoconf,automake,patch \
  trixie trixie "$mirror" >/dev/null

if [ "$dualpi2" = yes ]; then
  step "sch_dualpi2.ko, built out of tree in the chroot"
  dpkg-deb --fsys-tarfile linux-source-7.3_*.deb | tar -xO ./usr/src/linux-source-7.3.tar.xz |
    tar -xJ linux-source-7.3/net/sched/sch_dualpi2.c
  # Building needs the headers' files, not their packaging (whose scripts want
  # linux-base and pahole): unpack them into the chroot.
  for d in linux-headers-*.deb linux-kbuild-*.deb; do dpkg-deb -x "$d" trixie; done
  mkdir -p trixie/build
  cp linux-source-7.3/net/sched/sch_dualpi2.c trixie/build/
  echo 'obj-m := sch_dualpi2.o' > trixie/build/Makefile
  mount -t proc proc trixie/proc # objtool reads it
  # No pahole in the chroot: no BTF for the module, which loading does not need.
  chroot trixie make -s -C "/usr/src/linux-headers-$kv" M=/build CC=gcc-14 CONFIG_DEBUG_INFO_BTF_MODULES= modules >/dev/null
  umount trixie/proc
  # Without its debug sections, as Debian ships modules (INSTALL_MOD_STRIP): 37 KB,
  # not 910. A guest reads a --module through fw_cfg a byte at a time, about 100 KB
  # a second in the emulation: unstripped it made every VM lab boot 9 s longer.
  chroot trixie strip --strip-debug /build/sch_dualpi2.ko
  mkdir -p "$r/lib/modules/$kv/extra"
  cp trixie/build/sch_dualpi2.ko "$r/lib/modules/$kv/extra/"
  cp trixie/build/sch_dualpi2.ko dualpi2.ko # kept beside the image, for --module
fi

step "modules"
# Debian's module packages leave modules.dep to their postinst.
depmod -b "$PWD/${mdir%/lib/modules/*}" "$kv"
# The modules the lab needs, with what they depend on (from the package's modules.dep).
want='virtio_net virtio_pci virtio_blk qemu_fw_cfg veth dummy ifb sch_htb sch_tbf sch_prio sch_mq
sch_fq sch_fq_codel sch_codel sch_pie sch_fq_pie sch_cake sch_netem sch_ingress sch_sfq sch_red
cls_u32 cls_fw cls_matchall act_mirred tcp_bbr tcp_dctcp tcp_cubic'
pat=$(for m in $want; do printf '%s\n' "$m" "${m//_/-}"; done | sort -u)
sel=$(awk -F: -v pat="$pat" 'BEGIN{n=split(pat,a,"\n"); for(i=1;i<=n;i++) w[a[i]]=1}
  {name=$1; sub(/.*\//,"",name); sub(/\.ko(\.xz|\.zst)?$/,"",name); if (name in w) {print $1; print $2}}' "$mdir/modules.dep" | tr ' ' '\n' | grep . | sort -u)
for f in $sel; do
  mkdir -p "$r/lib/modules/$kv/$(dirname "$f")"
  case $f in
  *.xz) xz -dc "$mdir/$f" > "$r/lib/modules/$kv/${f%.xz}" ;;
  *.zst) zstd -qdc "$mdir/$f" > "$r/lib/modules/$kv/${f%.zst}" ;;
  *) cp "$mdir/$f" "$r/lib/modules/$kv/$f" ;;
  esac
done
cp "$mdir"/modules.builtin* "$r/lib/modules/$kv/" 2>/dev/null || true
/bin/busybox depmod -b "$r" "$kv"

step "userland"
# copy_bin BINARY: a binary of this machine and the libraries ldd names.
copy_bin() {
  mkdir -p "$r$(dirname "$1")"
  cp "$1" "$r$1"
  for l in $(ldd "$1" | grep -o '/[^ ]*'); do mkdir -p "$r$(dirname "$l")"; cp -nL "$l" "$r$l"; done
}
cp /bin/busybox "$r/bin/"
copy_bin /usr/sbin/sshd

step "tc, ip, ethtool and dash, built statically in the chroot"
# Linked statically and not position-independent, so a start maps one file and
# relocates nothing. Under emulation a dynamically linked program's start (the
# loader mapping and relocating its libraries) costs more than its work, and a
# run starts about 35 tc, 22 ethtool and 21 sh on the router, whose one vCPU
# bounds the run before and after its traffic. 20 starts in a router guest,
# dynamic against static: tc qdisc show 1.27-1.40 s against 0.23-0.26, ethtool -k
# 0.92-0.94 against 0.21-0.23, ip -j link show 1.15-1.18 against 0.22-0.24,
# dash -c true 1.22-1.52 against 0.25-0.27. Each printed the same as the
# dynamic build for every command the tool runs (tc -V and ip -V name no libbpf).
# ethtool and dash are bookworm's 6.1 and 0.5.12-2 with Debian's patches (the
# versions earlier images copied from the machine that built them); iproute2 is forky's
# upstream tarball, checked against the hash in forky's signed Sources index.
# Built without libbpf, libelf, libcap and SELinux: no tc bpf objects in the lab.
mkdir -p trixie/src
(cd trixie/src && papt apt-get source --download-only -qq ethtool/bookworm dash/bookworm)
set -- $(cd trixie/src && papt apt-get source --print-uris -qq iproute2/forky | awk '/\.orig\.tar/')
[ $# -ge 4 ] || { echo "no iproute2 source in forky's Sources index of $mirror" >&2; exit 1; }
APT_CONFIG="$work/apt/apt.conf" /usr/lib/apt/apt-helper download-file "${1//\'/}" "$work/trixie/src/$2" "$4" >/dev/null
(
  cd trixie/src
  for t in iproute2_*.orig.tar.* ethtool_*.orig.tar.* dash_*.orig.tar.*; do tar -xf "$t"; done
  for p in ethtool dash; do tar -xf "$p"_*.debian.tar.* -C "$p"-*/; done
)
cat > trixie/src/build <<'B'
set -eu
cd /src/iproute2-*/
CC=gcc-14 ./configure
# Debian's netns directory (upstream's is /var/run/netns, which the guests lack).
make -s -j"$(nproc)" CC=gcc-14 SHARED_LIBS=n LDFLAGS=-static NETNS_RUN_DIR=/run/netns SUBDIRS="lib tc ip netem"
cd /src/ethtool-*/
./configure -q CC=gcc-14 LDFLAGS=-static
make -s -j"$(nproc)"
cd /src/dash-*/
for p in $(grep -v '^#' debian/patches/series); do patch -s -p1 < "debian/patches/$p"; done
autoreconf -fi # the patches add a source file to Makefile.am
# debian/rules' options
./configure -q CC=gcc-14 LDFLAGS=-static --disable-fnmatch --disable-lineno --disable-glob
make -s -j"$(nproc)"
B
chroot trixie sh /src/build > build.log 2>&1 || { tail -n 40 build.log >&2; echo "vm build: building tc, ip, ethtool or dash failed (the log's end above)" >&2; exit 1; }
for b in iproute2-*/tc/tc iproute2-*/ip/ip ethtool-*/ethtool dash-*/src/dash; do
  f=$(cd trixie/src && echo $b)
  chroot trixie strip "/src/$f"
  if chroot trixie readelf -lW "/src/$f" | grep -q 'program interpreter'; then
    echo "vm build: $f is not linked statically" >&2
    exit 1
  fi
done
cp trixie/src/iproute2-*/tc/tc trixie/src/iproute2-*/ip/ip trixie/src/ethtool-*/ethtool "$r/usr/sbin/"
# Debian's static busybox prefers its applets to PATH, so its shell would run its own
# tc and ip: the login shell is dash.
cp trixie/src/dash-*/src/dash "$r/bin/dash"
ln -s dash "$r/bin/sh"
mkdir -p "$r/usr/lib/tc" "$r/etc/iproute2"
cp trixie/src/iproute2-*/netem/*.dist "$r/usr/lib/tc/" # netem's distribution tables

cat > "$r/etc/passwd" <<'P'
root:x:0:0:root:/root:/bin/dash
sshd:x:100:65534::/run/sshd:/bin/false
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
P
printf 'root:x:0:\nnogroup:x:65534:\n' > "$r/etc/group"
printf 'root:*:1::::::\nsshd:*:1::::::\n' > "$r/etc/shadow"
chmod 600 "$r/etc/shadow"
cat > "$r/etc/ssh/sshd_config" <<'S'
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
AuthorizedKeysFile /etc/ssh/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
UseDNS no
StrictModes no
PidFile /run/sshd.pid
MaxSessions 64
MaxStartups 64
S
cp "$INIT" "$r/init"
chmod +x "$r/init"

step "initrd"
(cd "$r" && find . | cpio -o -H newc 2>/dev/null | gzip -1) > initrd.gz
mkdir -p "$out"
cp "$vmlinuz" "$out/vmlinuz"
cp initrd.gz "$out/initrd.gz"
echo "$kv" > "$out/kver"
echo "$dualpi2" > "$out/dualpi2"
[ ! -f dualpi2.ko ] || cp dualpi2.ko "$out/sch_dualpi2.ko"
step "done: $out ($(du -sh "$out" | cut -f1))"
