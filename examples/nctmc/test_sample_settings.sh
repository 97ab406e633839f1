#!/bin/sh
# The defaults of `nctmc train` and the sampling settings a checkpoint
# carries (issue 34): a model trained with no recipe flags gets its
# process's best measured settings (uniform: denoiser link, t ~ sqrt;
# masked: t ~ sqrt), its checkpoint recommends its process's sampler, and
# `nctmc sample` uses that recommendation for every one of --method, --grid
# and --steps not given, the flags overriding each. A 0.2.0 checkpoint,
# which carries none, gets its process's. --tokens writes the ids.
#
#   test_sample_settings.sh PATH/TO/nctmc PATH/TO/digits.txt PATH/TO/v0.2.0-uniform.safetensors
set -u
nctmc=$1
digits=$2
legacy=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

ok() { passed=$((passed + 1)); }
bad() {
    failed=$((failed + 1))
    echo "FAIL: $*"
}
run() {
    name=$1
    shift
    if "$nctmc" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"; then
        ok
    else
        bad "nctmc $* (status $?)"
        sed 's/^/  | /' "$tmp/$name.err" | tail -15
    fi
}
has() {
    if grep -q -- "$2" "$tmp/$1"; then ok; else bad "'$2' not in $1"; sed 's/^/  | /' "$tmp/$1" | tail -8; fi
}
lacks() {
    if grep -q -- "$2" "$tmp/$1"; then bad "'$2' in $1"; sed 's/^/  | /' "$tmp/$1" | tail -8; else ok; fi
}

tiny="--layers 1 --d-model 32 --heads 2 --cond-dim 16 --threads 2 --batch 4 --steps 2 --warmup 1"
run prepare prepare --digits "$digits" --out "$tmp/digits"

# --- train's defaults, per process -----------------------------------------
run train_u train --data "$tmp/digits" --out "$tmp/u.safetensors" $tiny --process uniform
has train_u.err "denoiser exit link"
has train_u.err "t ~ sqrt"
run train_m train --data "$tmp/digits" --out "$tmp/m.safetensors" $tiny --process masked
has train_m.err "noise_posterior exit link"
has train_m.err "t ~ sqrt"
# explicit settings keep their meaning
run train_x train --data "$tmp/digits" --out "$tmp/x.safetensors" $tiny --process uniform \
    --exit-link noise_posterior --time-sampling uniform
has train_x.err "noise_posterior exit link"
has train_x.err "t ~ uniform"
# a preset's link reaches the model (it did not before 0.8.0's "auto")
run train_p train --data "$tmp/digits" --out "$tmp/p.safetensors" --preset cpu-small $tiny
has train_p.err "denoiser exit link"
has train_p.err "t ~ sqrt"

# --- the checkpoint's recommendation, and the overrides --------------------
run info_u info "$tmp/u.safetensors"
has info_u.out "sampling     posterior, even grid, 64 steps"
run info_m info "$tmp/m.safetensors"
has info_m.out "sampling     tau-leaping, even grid, 128 steps"

run s_u sample "$tmp/u.safetensors" --n 2 --label 3 --no-preview --seed 1
has s_u.err "sampler: posterior, even grid, 64 steps"
has s_u.err "(posterior, 64 steps)"
run s_m sample "$tmp/m.safetensors" --n 2 --label 3 --no-preview --seed 1
has s_m.err "sampler: tau-leaping, even grid, 128 steps"
run s_o1 sample "$tmp/u.safetensors" --n 2 --label 3 --no-preview --method tau
has s_o1.err "sampler: tau-leaping, even grid, 64 steps"
run s_o2 sample "$tmp/u.safetensors" --n 2 --label 3 --no-preview --grid geometric --steps 7
has s_o2.err "sampler: posterior, geometric grid, 7 steps"
run s_o3 sample "$tmp/u.safetensors" --n 2 --label 3 --no-preview --method euler --grid uniform \
    --steps 9
lacks s_o3.err "sampler:"
has s_o3.err "(Euler, 9 steps)"
# the recommendation gives the same samples as the same flags given
run s_same sample "$tmp/u.safetensors" --n 2 --label 3 --no-preview --seed 1 \
    --method posterior --grid uniform --steps 64 --tokens --out "$tmp/explicit.txt"
run s_auto sample "$tmp/u.safetensors" --n 2 --label 3 --no-preview --seed 1 \
    --tokens --out "$tmp/auto.txt"
cmp -s "$tmp/explicit.txt" "$tmp/auto.txt" && ok || bad "the recommendation differs from its flags"

# --tokens: a header and 64 ids a sample
n=$(grep -v '^---' "$tmp/auto.txt" | awk '{ print NF }' | sort -u)
[ "$n" = "64" ] && ok || bad "--tokens wrote lines of '$n' ids, not 64"
has auto.txt "--- sample 1 (label 3) ---"

# --- an old checkpoint (0.2.0, uniform process) carries none ----------------
run s_old sample "$legacy" --n 1 --seed 1
has s_old.err "sampler: posterior, even grid, 64 steps"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
