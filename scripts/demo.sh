#!/bin/sh
# Installs what building needs, builds libnctmc and runs the embedding
# example (examples/forward.c): a model created, evaluated and edited
# through the public API.
set -eu
cd "$(dirname "$0")/.."
scripts/install-deps.sh --build
if [ -d build ]; then
    meson setup --reconfigure build >/dev/null
else
    meson setup build >/dev/null
fi
ninja -C build
echo
build/examples/forward
