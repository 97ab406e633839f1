#!/bin/sh
# `nctmc eval` over MPI ranks (docs/distributed.md, "Evaluation over ranks"):
#   1. `mpirun -n 2` and `-n 3 nctmc eval` print, on rank 0 only, exactly
#      what one process prints (the estimate, its standard error, the prior,
#      mean loss, token count and the whole reliability table), for a
#      uniform model with class labels and a masked one with sqrt time
#      sampling; the pass count is not a multiple of the rank count;
#   2. the library-level check (tests/eval_ranks_check.c) under 2 and 3
#      ranks: every byte of nctmc_eval_result equal to one process's,
#      cancellation from one rank, refusals;
#   3. ranks whose eval parameters differ refuse, naming them.
#
#   test_distributed_eval.sh PATH/TO/nctmc PATH/TO/digits.txt MPIRUN PATH/TO/eval_ranks_check
set -u
nctmc=$1
digits=$2
mpirun=$3
check=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# CI runs as root, which mpirun refuses unless told; shared memory between
# the ranks of one machine (no network needed in a container)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1
failed=0
bad() {
    failed=$((failed + 1))
    echo "FAIL: $*"
}
# run NAME N PROGRAM ARGS...: N ranks (N = 0: no mpirun), output in $tmp/NAME.log
run() {
    name=$1 n=$2
    shift 2
    if [ "$n" = 0 ]; then
        "$@" >"$tmp/$name.log" 2>&1
    else
        timeout 300 "$mpirun" --oversubscribe -n "$n" "$@" >"$tmp/$name.log" 2>&1
    fi
    status=$?
    if [ $status -ne 0 ]; then
        bad "$name: $* (status $status)"
        tail -15 "$tmp/$name.log" | sed 's/^/  | /'
    fi
}
has() {
    if grep -q -- "$2" "$tmp/$1"; then :; else
        bad "'$2' not in $1"
        tail -12 "$tmp/$1" | sed 's/^/  | /'
    fi
}
# same_estimate A B: everything after the header line is the same bytes
same_estimate() {
    tail -n +2 "$tmp/$1.log" >"$tmp/$1.body"
    tail -n +2 "$tmp/$2.log" >"$tmp/$2.body"
    grep -q '^NELBO' "$tmp/$1.body" || bad "$1 printed no estimate"
    if ! cmp -s "$tmp/$1.body" "$tmp/$2.body"; then
        bad "$2 prints another estimate than $1"
        diff "$tmp/$1.body" "$tmp/$2.body" | head -12 | sed 's/^/  | /'
    fi
}

"$nctmc" prepare --digits "$digits" --out "$tmp/dg" >/dev/null 2>&1 || bad "prepare"
tiny="--data $tmp/dg --layers 1 --d-model 32 --heads 2 --cond-dim 16 --threads 1
      --steps 30 --batch 8 --eval-sequences 2 --eval-time-samples 1"
run trainu 0 "$nctmc" train $tiny --out "$tmp/u.st"
run trainm 0 "$nctmc" train $tiny --process masked --out "$tmp/m.st"

# --- 1. the tool: N ranks print one process's estimate ----------------------
# 7 sequences x 3 times = 21 rows, 11 passes of 2: not a multiple of 2 or 3
ev="--data $tmp/dg --sequences 7 --time-samples 3 --batch 2 --threads 1 --seed 4"
for model in u m; do
    extra=""
    [ $model = m ] && extra="--time-sampling sqrt"
    run ${model}1 0 "$nctmc" eval "$tmp/$model.st" $ev $extra
    for n in 2 3; do
        run $model$n $n "$nctmc" eval "$tmp/$model.st" $ev $extra
        same_estimate ${model}1 $model$n
        has $model$n.log "; $n ranks (mpi engine)"
        [ "$(grep -c '^NELBO' "$tmp/$model$n.log")" = 1 ] || bad "$model$n: not rank 0 alone printed"
    done
done
has u1.log "with labels"
has u1.log "^exit-rate reliability: nu"
# the control: another seed is another estimate, so the comparison can fail
run u1s 0 "$nctmc" eval "$tmp/u.st" $ev --seed 5
tail -n +2 "$tmp/u1s.log" | cmp -s - "$tmp/u1.body" && bad "seed 4 and 5 print the same estimate"

# --- 2. the library: every field, cancellation, refusals ---------------------
for n in 2 3; do
    run check$n $n "$check"
    [ "$(grep -c 'passed, 0 failed' "$tmp/check$n.log")" = "$n" ] || bad "check$n: not every rank passed"
done

# --- 3. ranks that disagree refuse ------------------------------------------
if timeout 300 "$mpirun" --oversubscribe \
    -n 1 "$nctmc" eval "$tmp/u.st" $ev : -n 1 "$nctmc" eval "$tmp/u.st" $ev --seed 9 \
    >"$tmp/refuse.log" 2>&1; then
    bad "ranks with different seeds evaluated"
fi
has refuse.log "differ from rank 0 in the eval parameters"

if [ "$failed" -ne 0 ]; then
    echo "$failed check(s) failed"
    exit 1
fi
echo "distributed eval: all checks passed"
