#!/bin/sh
# Installs what building needs, builds libnctmc and the `nctmc` tool, then
# trains a class-conditional model of handwritten digits (the 8x8 images of
# examples/data/digits.txt) for three minutes on two cores, and draws ten
# digits of every class with tau-leaping and with Euler steps: PNG grids in
# build/demo/ and ASCII previews here. docs/cli.md explains every flag.
set -eu
cd "$(dirname "$0")/.."
scripts/install-deps.sh --build
if [ -d build ]; then
    meson setup --reconfigure build >/dev/null
else
    meson setup build >/dev/null
fi
ninja -C build

nctmc=build/examples/nctmc
demo=build/demo
echo
$nctmc prepare --digits examples/data/digits.txt --out $demo/digits
echo
# The paper's process: uniform noise with a learned exit rate (0.3.0's
# log-SNR time input and noise-posterior exit link, the defaults). Three
# minutes of two cores (1000 steps) are enough for recognisable digits when
# sampling follows the class with classifier-free guidance (--cfg 3: the
# class-conditional rates pushed away from the unconditional ones; the
# trainer drops 10% of the labels to learn both). research/2026-11-26-digits-demo-uniform.md has
# the accuracy a classifier gives the samples, for this and the masked process.
# A short run wants a short EMA (0.999 would still remember the untrained
# start).
$nctmc train --data $demo/digits --out $demo/digits.safetensors \
    --process uniform --layers 4 --d-model 128 --heads 4 --cond-dim 64 \
    --batch 64 --lr 2e-3 --warmup 100 --steps 1000 --ema 0.99 \
    --minutes 3 --threads 2 --eval-every 0
for method in tau euler; do
    echo
    echo "10 samples of every digit, method $method, guidance 3:"
    $nctmc sample $demo/digits.safetensors --method $method --per-class 10 --cfg 3 \
        --steps 128 --batch 50 --threads 2 --png $demo/digits-$method.png
done
echo "PNG grids: $demo/digits-tau.png $demo/digits-euler.png"
# How recognisable are they? An independent classifier (scikit-learn's SVC
# on the real digits) classifies 500 samples, when scikit-learn is there.
if /usr/bin/python3 -c "import numpy, sklearn" 2>/dev/null; then
    echo
    NCTMC_LIBRARY=build/libnctmc.so.1 /usr/bin/python3 scripts/digits_accuracy.py \
        $demo/digits.safetensors --cfg 3 --per-class 50
else
    echo "(install python3-sklearn and run scripts/digits_accuracy.py" \
        "$demo/digits.safetensors --cfg 3 to classify the samples)"
fi
