#!/bin/sh
# Makes the arm64 sysroot that the aarch64 cross build links against and
# that qemu-aarch64 runs its programs in (cross/aarch64-linux-gnu.txt):
# Debian 12's arm64 OpenBLAS (pthread variant) and the C and Fortran
# runtimes it needs, unpacked from the arm64 .debs with dpkg -x.
#
#   scripts/arm64-sysroot.sh [DIR]     (default: build-arm64-sysroot/)
#
# The .debs come through a private apt state under DIR/apt (its own
# sources.list for arm64, its own empty dpkg status), so the machine's own
# apt configuration is not changed (no `dpkg --add-architecture`). Made once:
# a finished sysroot (DIR/.complete) is reused. The package list is exact
# (no dependency resolution): what libopenblas.so.0 and a C program need
# at run time; the cross compiler brings its own C headers and libraries
# (libc6-dev-arm64-cross).
#
# dpkg -x does not run maintainer scripts, so the alternatives that point
# libopenblas.so.0 and openblas.pc at the pthread variant are made here as
# plain links, and openblas.pc's prefix is left as /usr: the cross file's
# pkg-config sysroot (PKG_CONFIG_SYSROOT_DIR) prepends DIR.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-"$root/build-arm64-sysroot"}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
[ -f "$dir/.complete" ] && [ -f "$dir/sysroot.ini" ] && { echo "arm64-sysroot: $dir is ready"; exit 0; }

pkgs="libopenblas0-pthread libopenblas-pthread-dev libgfortran5 libgcc-s1 libc6"

apt_dir="$dir/apt"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/etc/preferences.d" \
    "$apt_dir/debs"
: >"$apt_dir/status"
cat >"$apt_dir/etc/sources.list" <<'EOF'
deb [arch=arm64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main
deb [arch=arm64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm-updates main
deb [arch=arm64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security bookworm-security main
EOF
apt_opts="-o APT::Architecture=arm64 -o APT::Architectures::=arm64
    -o Dir::State=$apt_dir -o Dir::State::Lists=$apt_dir/lists
    -o Dir::State::status=$apt_dir/status -o Dir::Cache=$apt_dir/cache
    -o Dir::Etc::SourceList=$apt_dir/etc/sources.list -o Dir::Etc::SourceParts=-
    -o Dir::Etc::Preferences=- -o Dir::Etc::PreferencesParts=$apt_dir/etc/preferences.d
    -o Debug::NoLocking=1 -o APT::Sandbox::User=root -q"
echo "arm64-sysroot: fetching the arm64 package lists"
# shellcheck disable=SC2086
apt-get $apt_opts update >/dev/null
echo "arm64-sysroot: downloading$(echo " $pkgs" | tr -s ' \n' ' ')"
# shellcheck disable=SC2086
(cd "$apt_dir/debs" && apt-get $apt_opts download $pkgs >/dev/null)

echo "arm64-sysroot: unpacking into $dir"
for deb in "$apt_dir"/debs/*.deb; do
    dpkg -x "$deb" "$dir"
done

# the alternatives (update-alternatives would have made these)
multi="$dir/usr/lib/aarch64-linux-gnu"
ln -sf openblas-pthread/libopenblas.so.0 "$multi/libopenblas.so.0"
ln -sf openblas-pthread/libopenblas.so "$multi/libopenblas.so"
mkdir -p "$multi/pkgconfig"
ln -sf ../openblas-pthread/pkgconfig/openblas.pc "$multi/pkgconfig/openblas.pc"
# absolute links inside the sysroot (e.g. libm.so's) would point at the host
# when the cross linker follows them: make them relative to DIR
find "$dir/usr/lib/aarch64-linux-gnu" "$dir/lib" -type l 2>/dev/null | while read -r link; do
    target=$(readlink "$link")
    case "$target" in
        /*) ln -sf "$dir$target" "$link" ;;
    esac
done
# Debian 12 arm64 is merged-/usr: /lib is a link to usr/lib in the base
# system, which dpkg -x of libc6 alone does not make
[ -e "$dir/lib/ld-linux-aarch64.so.1" ] || {
    mkdir -p "$dir/lib"
    ln -sf ../usr/lib/ld-linux-aarch64.so.1 "$dir/lib/ld-linux-aarch64.so.1"
}
[ -e "$dir/lib/aarch64-linux-gnu" ] || ln -sf ../usr/lib/aarch64-linux-gnu "$dir/lib/aarch64-linux-gnu"
test -f "$multi/openblas-pthread/libopenblas.so.0" -a -f "$dir/usr/include/aarch64-linux-gnu/openblas-pthread/cblas.h"
# the constant that cross/aarch64-linux-gnu.txt uses, for meson's
# --cross-file (given before that file)
printf "[constants]\nsysroot = '%s'\n" "$dir" >"$dir/sysroot.ini"
touch "$dir/.complete"
echo "arm64-sysroot: $dir is ready"
