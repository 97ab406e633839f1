#!/bin/sh
# Installs what building and the demo need, builds libnctmc and the `nctmc`
# tool, then trains a class-conditional model of handwritten digits (the
# 8x8 images of examples/data/digits.txt) on two cores, draws digits of
# every class with the sampler the checkpoint recommends, and has an
# independent classifier say how many it recognises. PNG grid in
# build/demo/, ASCII preview here. docs/cli.md explains every flag;
# research/2026-11-28-defaults-and-demo.md has the measurements behind the
# recipe and README.md the figures and times.
set -eu
cd "$(dirname "$0")/.."
start=$(date +%s)
# numpy and scikit-learn too: the classifier at the end
scripts/install-deps.sh --demo
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
# The paper's process, uniform noise with a learned exit rate, with the
# library's defaults: the denoiser exit link and training times drawn from
# the sqrt density, the best measured recipe (docs/training.md, "Defaults").
# All 1000 steps, the learning rate's cosine run to its end: a run that a
# time budget cuts short (0.x's --minutes 3 stopped a busy two-core machine
# at step 629) keeps a high rate and gives digits a classifier recognises
# ~70% of the time, and 500 steps are not enough either
# (research/2026-11-28-defaults-and-demo.md). --minutes is only a backstop.
# A short run wants a short EMA (0.999 would still remember the untrained
# start).
$nctmc train --data $demo/digits --out $demo/digits.safetensors \
    --process uniform --layers 4 --d-model 128 --heads 4 --cond-dim 64 \
    --batch 64 --lr 2e-3 --warmup 100 --steps 1000 --ema 0.99 \
    --minutes 30 --threads 2 --eval-every 0
trained=$(date +%s)
# The checkpoint says how to sample it (posterior sampler, even grid, 64
# steps for this process: `nctmc info`); classifier-free guidance (--cfg 3)
# pushes each class's rates away from the unconditional ones (the trainer
# dropped 10% of the labels to learn both).
echo
echo "10 samples of every digit, the checkpoint's sampler, guidance 3:"
$nctmc sample $demo/digits.safetensors --per-class 10 --cfg 3 --batch 50 --threads 2 \
    --seed 1 --png $demo/digits.png --tokens --out $demo/samples-1.txt
$nctmc sample $demo/digits.safetensors --per-class 10 --cfg 3 --batch 50 --threads 2 \
    --seed 2 --no-preview --tokens --out $demo/samples-2.txt
end=$(date +%s)
echo "PNG grid: $demo/digits.png"
echo
# How recognisable are they? scikit-learn's SVC, fitted on scikit-learn's
# own copy of the digits, classifies the 200 samples (it knows nothing of
# libnctmc).
/usr/bin/python3 scripts/digits_classify.py $demo/samples-1.txt $demo/samples-2.txt
echo "time: $((end - start)) s in all, $((trained - start)) s to build and train," \
    "$((end - trained)) s to sample"
