#!/bin/sh
# Tokens per second of 1 and 2 ranks of one thread each (issue 35), through
# nctmc train's own counter (global tokens per second of step time, rank 0),
# on the digits data, alternating the two so that a busy machine hurts both
# alike. A benchmark, not a test: compare the two lines of one run.
#
#   sh bench/distributed.sh BUILD_DIR [REPEATS]
set -eu
build=$1
repeats=${2:-3}
nctmc=$build/examples/nctmc
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
root=$(cd "$(dirname "$0")/.." && pwd)
"$nctmc" prepare --digits "$root/examples/data/digits.txt" --out "$tmp/dg" >/dev/null
args="--data $tmp/dg --layers 2 --d-model 128 --heads 4 --cond-dim 64 --threads 1 --steps 30
      --batch 8 --eval-sequences 4 --eval-time-samples 1 --log-every 30 --out $tmp/b.st"
i=0
while [ $i -lt "$repeats" ]; do
    printf '1 rank : '
    "$nctmc" train $args 2>&1 | grep -o '[0-9.]*k tok/s' | tail -1
    printf '2 ranks: '
    mpirun --oversubscribe -n 2 "$nctmc" train $args 2>&1 | grep -o '[0-9.]*k tok/s' | tail -1
    i=$((i + 1))
done
