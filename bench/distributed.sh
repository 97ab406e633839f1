#!/bin/sh
# Tokens per second of 1 and 2 ranks of one thread each (issue 35), through
# nctmc train's own counter (global tokens per second of step time, rank 0),
# on the digits data, alternating the two so that a busy machine hurts both
# alike; then, in the same run, PyTorch DDP (gloo) training the reference
# model with the same shapes and per-rank batch (bench/distributed_torch.py),
# and the ratios: 2 ranks / 1 rank for each, and libnctmc / PyTorch at the
# same rank count (medians over the repeats). The 2-rank run goes twice:
# with the gradient sum after the backward pass (the default) and
# overlapped with it (NCTMC_COMM_OVERLAP=1); the tool's "comm X%" is the
# share of step time the sum left exposed, so the first is the sum's whole
# share and 1 - exposed / whole (per step) the overlap achieved. Last,
# bench_allreduce: the fixed-order sum's bandwidth beside MPI_Allreduce's
# and the overlap of a synthetic backward pass (bench/bench_allreduce.c).
# A benchmark, not a test: compare the lines of one run, and note the load
# average printed first and last.
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
echo "load: $(uptime)"
"$nctmc" prepare --digits "$root/examples/data/digits.txt" --out "$tmp/dg" >/dev/null
args="--data $tmp/dg --layers 2 --d-model 128 --heads 4 --cond-dim 64 --threads 1 --steps 30
      --batch 8 --eval-sequences 4 --eval-time-samples 1 --log-every 30 --out $tmp/b.st"
# the tool prints "14.2k tok/s": tokens per second as a number
ktok() { grep -o '[0-9.]*k tok/s' | tail -1 | sed 's/k tok\/s//' | awk '{print $1 * 1000}'; }
# and, with several ranks, "comm 4.2%": the exposed share of step time
comm() { grep -o 'comm [0-9.]*%' | tail -1 | sed 's/comm //; s/%//'; }
i=0
while [ $i -lt "$repeats" ]; do
    v=$("$nctmc" train $args 2>&1 | ktok)
    echo "libnctmc 1 rank : $v tokens/s" && echo "$v" >>"$tmp/n1"
    env -u NCTMC_COMM_OVERLAP mpirun --oversubscribe -n 2 "$nctmc" train $args >"$tmp/log" 2>&1
    v=$(ktok <"$tmp/log") c=$(comm <"$tmp/log")
    echo "libnctmc 2 ranks: $v tokens/s, sum exposed $c% of step time" \
        "(after the backward pass, the default)"
    echo "$v" >>"$tmp/n2" && echo "$c" >>"$tmp/c2"
    NCTMC_COMM_OVERLAP=1 mpirun --oversubscribe -x NCTMC_COMM_OVERLAP -n 2 "$nctmc" train \
        $args >"$tmp/log" 2>&1
    v=$(ktok <"$tmp/log") c=$(comm <"$tmp/log")
    echo "libnctmc 2 ranks: $v tokens/s, sum exposed $c% of step time" \
        "(overlapped, NCTMC_COMM_OVERLAP=1)"
    echo "$v" >>"$tmp/o2" && echo "$c" >>"$tmp/co2"
    for r in 1 2; do
        v=$(/usr/bin/python3 "$root/bench/distributed_torch.py" --ranks $r --steps 30 |
            sed 's/.*tokens_per_s=\([0-9.]*\).*/\1/')
        echo "torch DDP $r rank(s): $v tokens/s" && echo "$v" >>"$tmp/t$r"
    done
    i=$((i + 1))
done
median() { sort -g "$1" | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
n1=$(median "$tmp/n1") n2=$(median "$tmp/n2") t1=$(median "$tmp/t1") t2=$(median "$tmp/t2")
o2=$(median "$tmp/o2") c2=$(median "$tmp/c2") co2=$(median "$tmp/co2")
echo "medians (tokens/s): libnctmc 1 rank $n1, 2 ranks $n2 (the default: after the backward" \
    "pass); torch DDP gloo 1 rank $t1, 2 ranks $t2"
awk -v n1="$n1" -v n2="$n2" -v t1="$t1" -v t2="$t2" 'BEGIN {
    printf "2 ranks / 1 rank: libnctmc %.2fx, torch DDP %.2fx\n", n2 / n1, t2 / t1
    printf "libnctmc / torch: 1 rank %.2fx, 2 ranks %.2fx\n", n1 / t1, n2 / t2 }'
# seconds per step are 1 / tokens per second (same tokens per step)
awk -v n1="$n1" -v n2="$n2" -v o2="$o2" -v c2="$c2" -v co2="$co2" 'BEGIN {
    printf "communication share, 2 ranks: %.1f%% of step time summed after the backward " \
           "pass (the default), %.1f%% exposed when overlapped (NCTMC_COMM_OVERLAP=1, %s " \
           "tokens/s, %.2fx 1 rank)\n", c2, co2, o2, o2 / n1
    printf "overlap achieved: %.0f%% of the sum hidden (1 - exposed / whole, per step); " \
           "overlapped / after: %.2fx tokens/s\n", 100 * (1 - (co2 / o2) / (c2 / n2)), o2 / n2 }'
echo "load: $(uptime)"
NCTMC_MPI_MODULE=$build/libnctmc-mpi.so mpirun --oversubscribe -x NCTMC_MPI_MODULE -n 2 \
    "$build/bench/bench_allreduce" --reps 51
echo "load: $(uptime)"
