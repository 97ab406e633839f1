#!/bin/sh
# Data-parallel training over MPI through the nctmc tool (issue 35,
# docs/distributed.md), on a tiny model, a few steps each:
#   1. `mpirun -n 2` and `-n 3 nctmc train` write the same checkpoint bytes
#      (weights, AdamW moments, EMA, metadata) as one process accumulating
#      the same micro-batches: uniform and masked processes, class labels,
#      clipping active (--clip 0.05 is far below the gradient norm);
#   2. resume 2 -> 1 ranks equals the uninterrupted 2-rank run, and 2 -> 3
#      ranks equals one process resuming with the same micro-batches;
#   3. ranks that disagree (seed, model configuration) refuse, naming it;
#   4. a rank killed with SIGKILL mid-run ends the job, non-zero, within
#      60 s, and the last checkpoint loads;
#   5. the gradient sum in one bucket per stage of the backward pass,
#      overlapped with it (NCTMC_COMM_OVERLAP=1, opt-in): the bits of one
#      process, and with accumulation on each rank the bits of the sum after
#      the backward pass (the default, NCTMC_COMM_OVERLAP=0); ranks that
#      would cut it differently refuse, and so do ranks of which one
#      overlaps and one keeps the default; values other than 0 and 1 (and
#      bucket sizes that are not a number of bytes) are refused.
#
#   test_distributed.sh PATH/TO/nctmc PATH/TO/digits.txt MPIRUN
set -u
nctmc=$1
digits=$2
mpirun=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# CI runs as root, which mpirun refuses unless told; shared memory between
# the ranks of one machine (no network needed in a container)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1
failed=0
ok() { :; }
bad() {
    failed=$((failed + 1))
    echo "FAIL: $*"
}
# mpi N NAME ARGS...: runs N ranks of nctmc, output in $tmp/NAME.log
mpi() {
    n=$1 name=$2
    shift 2
    if timeout 300 "$mpirun" --oversubscribe -n "$n" "$nctmc" "$@" >"$tmp/$name.log" 2>&1; then
        ok
    else
        bad "mpirun -n $n nctmc $* (status $?)"
        tail -15 "$tmp/$name.log" | sed 's/^/  | /'
    fi
}
one() {
    name=$1
    shift
    if "$nctmc" "$@" >"$tmp/$name.log" 2>&1; then ok; else
        bad "nctmc $* (status $?)"
        tail -15 "$tmp/$name.log" | sed 's/^/  | /'
    fi
}
same() {
    if cmp "$tmp/$1" "$tmp/$2" >/dev/null 2>&1; then ok; else bad "$1 and $2 differ"; fi
}
has() {
    if grep -q -- "$2" "$tmp/$1"; then ok; else
        bad "'$2' not in $1"
        tail -12 "$tmp/$1" | sed 's/^/  | /'
    fi
}

"$nctmc" prepare --digits "$digits" --out "$tmp/dg" >/dev/null 2>&1 || bad "prepare"
# constant rate after the warm-up, so that a resumed run with more --steps
# follows the same schedule as an uninterrupted one
tiny="--data $tmp/dg --layers 1 --d-model 32 --heads 2 --cond-dim 16 --threads 1 --warmup 2
      --lr 1e-3 --min-lr-ratio 1 --clip 0.05 --ema 0.9 --eval-sequences 4
      --eval-time-samples 1"

# --- 1. N ranks = one process accumulating N micro-batches ---------------
mpi 2 u2 train $tiny --steps 4 --batch 3 --out "$tmp/u2.st"
one u1 train $tiny --steps 4 --batch 3 --accumulation 2 --out "$tmp/u1.st"
same u2.st u1.st
has u2.log "world: 2 ranks (mpi engine)"
has u2.log "global batch 6"
has u2.log "clip 0.05"
has u2.log "10 classes"
# only rank 0 prints
[ "$(grep -c '^model:' "$tmp/u2.log")" = 1 ] || bad "more than one rank printed the setup"
mpi 3 m3 train $tiny --steps 4 --batch 2 --process masked --out "$tmp/m3.st"
one m1 train $tiny --steps 4 --batch 2 --accumulation 3 --process masked --out "$tmp/m1.st"
same m3.st m1.st
# the control: one batch of 6 is the same run only up to rounding
one m6 train $tiny --steps 4 --batch 6 --process masked --out "$tmp/m6.st"
cmp "$tmp/m6.st" "$tmp/m3.st" >/dev/null 2>&1 && bad "batch 6 and 3 ranks x 2 agree bit for bit"

# --- 2. resume across rank counts ----------------------------------------
mpi 2 full train $tiny --steps 8 --batch 3 --out "$tmp/full.st"
# 2 -> 1: the saved split (batch 3 x 2 micro-batches) on one process
one r21 train --data "$tmp/dg" --threads 1 --resume "$tmp/u2.st" --steps 8 \
    --out "$tmp/r21.st"
same r21.st full.st
# 2 -> 3: 3 ranks x batch 2 = one process with 3 micro-batches of 2
mpi 3 r23 train --data "$tmp/dg" --threads 1 --resume "$tmp/u2.st" --steps 8 --batch 2 \
    --accumulation 1 --out "$tmp/r23.st"
one r23ref train --data "$tmp/dg" --threads 1 --resume "$tmp/u2.st" --steps 8 --batch 2 \
    --accumulation 3 --out "$tmp/r23ref.st"
same r23.st r23ref.st
has r23.log "global batch 6"

# --- 3. ranks that disagree refuse ---------------------------------------
refuse() {
    name=$1 text=$2
    shift 2
    if timeout 300 "$mpirun" --oversubscribe "$@" >"$tmp/$name.log" 2>&1; then
        bad "$name: ranks that disagree trained"
    fi
    has "$name.log" "$text"
}
refuse seed "differ from rank 0 in .*the seed" \
    -n 1 "$nctmc" train $tiny --steps 2 --batch 2 --seed 1 --out "$tmp/s.st" : \
    -n 1 "$nctmc" train $tiny --steps 2 --batch 2 --seed 2 --out "$tmp/s.st"
refuse config "differ from rank 0 in the model's configuration" \
    -n 1 "$nctmc" train $tiny --steps 2 --batch 2 --out "$tmp/c.st" : \
    -n 1 "$nctmc" train $tiny --steps 2 --batch 2 --layers 2 --out "$tmp/c.st"
[ -e "$tmp/s.st" ] && bad "a refused run wrote a checkpoint"

# --- 4. a rank killed mid-run --------------------------------------------
"$mpirun" --oversubscribe -n 2 "$nctmc" train $tiny --steps 1000000 --batch 2 \
    --save-every 5 --out "$tmp/k.st" >"$tmp/kill.log" 2>&1 &
job=$!
waited=0
while [ ! -e "$tmp/k.st" ] && [ $waited -lt 600 ]; do sleep 0.1; waited=$((waited + 1)); done
victim=$(pgrep -P "$job" -f "$nctmc" | tail -1)
if [ -z "$victim" ]; then
    bad "no rank to kill (the job: $(tail -3 "$tmp/kill.log"))"
else
    kill -9 "$victim"
    waited=0
    while kill -0 "$job" 2>/dev/null && [ $waited -lt 600 ]; do sleep 0.1; waited=$((waited + 1)); done
    if kill -0 "$job" 2>/dev/null; then
        bad "the job still runs 60 s after a rank was killed"
        pkill -9 -P "$job"
        kill -9 "$job"
    fi
    wait "$job"
    status=$?
    [ "$status" -ne 0 ] || bad "the job exited 0 after a rank was killed"
    has kill.log "signal 9"
    one killinfo info "$tmp/k.st"
    one killresume train --data "$tmp/dg" --threads 1 --resume "$tmp/k.st" --steps 6 \
        --out "$tmp/k1.st"
fi

# --- 5. the overlapped sum, one bucket per stage ---------------------------
# The sum runs after the backward pass unless NCTMC_COMM_OVERLAP=1, so the
# overlapped runs here ask for it. NCTMC_COMM_BUCKET_BYTES=1 makes every
# stage of the backward pass a bucket of its own (the default, 1 MiB, leaves
# a small model one bucket). With accumulation on each rank (the last
# micro-batch's part added bucket by bucket) the reference is the sum after
# the backward pass (NCTMC_COMM_OVERLAP=0): ranks add their own
# micro-batches first, so one process adds the same partials in another
# order
three="--data $tmp/dg --layers 3 --d-model 32 --heads 2 --cond-dim 16 --threads 1 --warmup 2
       --lr 1e-3 --min-lr-ratio 1 --clip 0.05 --ema 0.9 --eval-sequences 4
       --eval-time-samples 1"
export NCTMC_COMM_BUCKET_BYTES=1 NCTMC_COMM_OVERLAP=1
mpi 3 b3 train $three --steps 3 --batch 2 --process masked --out "$tmp/b3.st"
mpi 2 b2 train $three --steps 3 --batch 2 --accumulation 2 --out "$tmp/b2.st"
NCTMC_COMM_OVERLAP=0
mpi 2 b2after train $three --steps 3 --batch 2 --accumulation 2 --out "$tmp/b2after.st"
unset NCTMC_COMM_OVERLAP NCTMC_COMM_BUCKET_BYTES
one b3ref train $three --steps 3 --batch 2 --accumulation 3 --process masked \
    --out "$tmp/b3ref.st"
same b3.st b3ref.st
same b2.st b2after.st
has b2.log "comm [0-9.]*%"
# ranks that would cut the slab differently (and so start different sums)
# refuse before the first step
refuse buckets "differ from rank 0 in the gradient buckets" \
    -n 1 env NCTMC_COMM_OVERLAP=1 NCTMC_COMM_BUCKET_BYTES=1 "$nctmc" train $three --steps 2 \
    --batch 2 --out "$tmp/bk.st" : \
    -n 1 env NCTMC_COMM_OVERLAP=1 "$nctmc" train $three --steps 2 --batch 2 --out "$tmp/bk.st"
# the default is the sum after the backward pass: a rank that asks for the
# overlap differs from one that keeps the default, one that says 0 does not
refuse default "differ from rank 0 in the gradient buckets" \
    -n 1 env NCTMC_COMM_OVERLAP=1 "$nctmc" train $three --steps 2 --batch 2 \
    --out "$tmp/d.st" : -n 1 "$nctmc" train $three --steps 2 --batch 2 --out "$tmp/d.st"
if timeout 300 "$mpirun" --oversubscribe -n 1 env NCTMC_COMM_OVERLAP=0 "$nctmc" train $three \
    --steps 2 --batch 2 --out "$tmp/d0.st" : -n 1 "$nctmc" train $three --steps 2 --batch 2 \
    --out "$tmp/d0.st" >"$tmp/d0.log" 2>&1; then ok; else
    bad "NCTMC_COMM_OVERLAP=0 on one rank and the default on the other refused (status $?)"
    tail -12 "$tmp/d0.log" | sed 's/^/  | /'
fi
# values that mean neither are refused, naming the variable
for v in NCTMC_COMM_OVERLAP=yes NCTMC_COMM_OVERLAP=2 NCTMC_COMM_BUCKET_BYTES=0 \
    NCTMC_COMM_BUCKET_BYTES=1MiB; do
    if env "$v" "$nctmc" train $tiny --steps 1 --batch 2 --out "$tmp/v.st" >"$tmp/v.log" 2>&1
    then
        bad "$v was accepted"
    fi
    has v.log "${v%%=*}=\"${v#*=}\" is n"
done
[ -e "$tmp/v.st" ] && bad "a refused value wrote a checkpoint"

if [ "$failed" -ne 0 ]; then
    echo "$failed check(s) failed"
    exit 1
fi
echo "distributed: all checks passed"
