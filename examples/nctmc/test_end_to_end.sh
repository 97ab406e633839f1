#!/bin/sh
# End to end through the nctmc tool, in a temporary directory: prepare the
# digits, train a tiny model for 20 steps (validating and saving on the
# way), info, sample with every method (PNG + preview + text), eval,
# resume, Ctrl-C during training, the embedding example; then a text model
# with prefix and infilling constraints.
#
#   test_end_to_end.sh PATH/TO/nctmc PATH/TO/embed PATH/TO/digits.txt
set -u
nctmc=$1
embed=$2
digits=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

ok() { passed=$((passed + 1)); }
bad() {
    failed=$((failed + 1))
    echo "FAIL: $*"
}

# run NAME ARGS...: runs nctmc, keeping stdout/stderr in $tmp/NAME.out/.err
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

# has NAME.STREAM TEXT: TEXT occurs in that captured output
has() {
    if grep -q -- "$2" "$tmp/$1"; then ok; else bad "'$2' not in $1"; sed 's/^/  | /' "$tmp/$1" | tail -8; fi
}

tiny="--layers 1 --d-model 32 --heads 2 --cond-dim 16 --threads 2"

# --- digits: prepare, train, info ------------------------------------------
run prepare prepare --digits "$digits" --out "$tmp/digits"
for f in train.bin val.bin tokenizer.txt; do
    [ -s "$tmp/digits/$f" ] && ok || bad "prepare wrote no $f"
done
has prepare.out "sequences of 64 tokens, labelled"

run train train --data "$tmp/digits" --out "$tmp/m.safetensors" $tiny --batch 8 \
    --steps 20 --warmup 5 --lr 1e-3 --eval-every 10 --eval-sequences 16 \
    --eval-time-samples 2 --save-every 10 --log-every 5
has train.err "finished at step 20 of 20"
has train.err "validation"
has train.err "train 20/20"
has train.err "10 classes"

# a preset sets the defaults; the flags given override it, before or after it
run preset train --data "$tmp/digits" --out "$tmp/p.safetensors" --layers 1 --preset cpu-small \
    --d-model 32 --heads 2 --batch 4 --steps 3 --threads 2 --time-sampling logit \
    --eval-sequences 8 --eval-time-samples 2
has preset.err "preset: cpu-small"
has preset.err "model: 1 layers, d 32, 2 heads, cond 64, S 17, L 64, 10 classes, uniform process"
has preset.err "trainer: batch 4 x 1 micro-batches = global batch 4, lr 0.002 (warm-up 100, cosine to 0.1 x over 3 steps), clip 1, EMA 0.99"
has preset.err "t ~ logit"
has preset.err "cpu backend"
run info_preset info "$tmp/p.safetensors"
has info_preset.out "t ~ logit (eps 0.001)"

run info info "$tmp/m.safetensors" --tensors
has info.out "10 classes"
has info.out "image 8x8, 17 grey levels"
has info.out "training     step 20 of 20"
has info.out "rate_head"

# --- sampling ---------------------------------------------------------------
run sample_tau sample "$tmp/m.safetensors" --per-class 2 --steps 8 --threads 2 \
    --png "$tmp/tau.png" --out "$tmp/tau.txt"
has sample_tau.out "9:"
has sample_tau.err "sampled 20 sequences of 64 tokens"
[ -s "$tmp/tau.txt" ] && ok || bad "sample --out wrote nothing"
if [ "$(head -c 8 "$tmp/tau.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ]; then
    ok
else
    bad "tau.png has no PNG signature"
fi
if [ -x /usr/bin/python3 ]; then
    if /usr/bin/python3 - "$tmp/tau.png" <<'PY'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
at, idat = 8, b""
while at < len(data):
    n, = struct.unpack(">I", data[at:at + 4]); kind = data[at + 4:at + 8]
    body = data[at + 8:at + 8 + n]
    assert zlib.crc32(kind + body) & 0xFFFFFFFF == struct.unpack(">I", data[at + 8 + n:at + 12 + n])[0]
    if kind == b"IHDR": w, h = struct.unpack(">II", body[:8])
    if kind == b"IDAT": idat += body
    at += 12 + n
assert len(zlib.decompress(idat)) == (w + 1) * h
# 2 columns, 10 rows of 8x8 images at scale 8 with 4-pixel gaps
assert (w, h) == (4 + 2 * 68, 4 + 10 * 68), (w, h)
PY
    then ok; else bad "tau.png does not decode as expected"; fi
fi

run sample_euler sample "$tmp/m.safetensors" --method euler --label 3 --n 3 --steps 8 \
    --cfg 2 --threads 2 --no-preview --out "$tmp/euler.txt"
has euler.txt "(label 3)"
run sample_posterior sample "$tmp/m.safetensors" --method posterior --grid geometric \
    --n 2 --steps 8 --correct 4 --threads 2
has sample_posterior.err "posterior"
# the guidance rules and the correction modes reach the library (20 steps
# leave the EMA weights near their start, where the rules barely differ:
# tests/test_sampler_modes.c measures the difference)
run rule_rates sample "$tmp/m.safetensors" --label 3 --n 3 --steps 8 --cfg 3 \
    --cfg-rule rates --threads 2 --no-preview --out "$tmp/rates.txt"
run rule_separate sample "$tmp/m.safetensors" --label 3 --n 3 --steps 8 --cfg 3 \
    --cfg-rule separate --threads 2 --no-preview --out "$tmp/separate.txt"
run rule_default sample "$tmp/m.safetensors" --label 3 --n 3 --steps 8 --cfg 3 \
    --threads 2 --no-preview --out "$tmp/default.txt"
cmp -s "$tmp/separate.txt" "$tmp/default.txt" && ok || bad "--cfg-rule separate is not the default"
run gibbs sample "$tmp/m.safetensors" --n 3 --steps 8 --correct 16 --correct-mode gibbs \
    --correct-temp 1 --threads 2 --no-preview --out "$tmp/gibbs.txt"
run greedy sample "$tmp/m.safetensors" --n 3 --steps 8 --correct 16 --correct-mode greedy \
    --correct-temp 1 --threads 2 --no-preview --out "$tmp/greedy.txt"
cmp -s "$tmp/gibbs.txt" "$tmp/greedy.txt" && bad "--correct-mode changes nothing" || ok

# the samples depend on the seed, not on the batch size
run det1 sample "$tmp/m.safetensors" --n 5 --batch 5 --steps 6 --seed 9 --out "$tmp/d1.txt"
run det2 sample "$tmp/m.safetensors" --n 5 --batch 2 --steps 6 --seed 9 --out "$tmp/d2.txt"
cmp -s "$tmp/d1.txt" "$tmp/d2.txt" && ok || bad "samples change with --batch"

# --- eval, resume --------------------------------------------------------------
run eval eval "$tmp/m.safetensors" --data "$tmp/digits" --sequences 16 --time-samples 2 \
    --threads 2
has eval.out "NELBO"
has eval.out "exit-rate reliability"
has eval.out "ECE "
has eval.out "0.000-"

# --- convert: bf16 and int8 copies sample, evaluate, and cannot be trained ---
run convert_bf16 convert "$tmp/m.safetensors" --to bf16 --out "$tmp/m-bf16.safetensors"
has convert_bf16.out "bf16 linear weights"
run convert_int8 convert "$tmp/m.safetensors" --to int8 --out "$tmp/m-int8.safetensors"
run info_int8 info "$tmp/m-int8.safetensors"
has info_int8.out "weights      int8 linear layers"
has info.out "weights      f32"
run sample_int8 sample "$tmp/m-int8.safetensors" --n 3 --steps 6 --seed 9 --threads 2 \
    --no-preview --out "$tmp/int8.txt"
[ -s "$tmp/int8.txt" ] && ok || bad "sample from the int8 copy wrote nothing"
run eval_bf16 eval "$tmp/m-bf16.safetensors" --data "$tmp/digits" --sequences 16 \
    --time-samples 2 --threads 2
has eval_bf16.out "NELBO"
if "$nctmc" train --data "$tmp/digits" --resume "$tmp/m-bf16.safetensors" \
    --out "$tmp/m3.safetensors" --steps 25 >"$tmp/resume_bf16.out" 2>"$tmp/resume_bf16.err"; then
    bad "train --resume accepted a bf16 checkpoint"
else
    ok
fi
if "$nctmc" convert "$tmp/m-bf16.safetensors" --to int8 --out "$tmp/x.safetensors" \
    >"$tmp/reconvert.out" 2>"$tmp/reconvert.err"; then
    bad "convert accepted a converted checkpoint"
else
    ok
fi
has reconvert.err "already holds bf16"
if "$nctmc" convert "$tmp/m.safetensors" --out "$tmp/x.safetensors" >/dev/null 2>&1; then
    bad "convert without --to"
else
    ok
fi

run resume train --data "$tmp/digits" --resume "$tmp/m.safetensors" --out "$tmp/m2.safetensors" \
    --steps 25 --threads 2 --eval-sequences 8 --eval-time-samples 2
has resume.err "finished at step 25 of 25"
run info2 info "$tmp/m2.safetensors"
has info2.out "training     step 25 of 25"

# --- Ctrl-C saves and exits with 130 ---------------------------------------
"$nctmc" train --data "$tmp/digits" --out "$tmp/int.safetensors" $tiny --batch 4 \
    --steps 1000000 --log-every 1 --eval-every 0 >"$tmp/int.out" 2>"$tmp/int.err" &
pid=$!
for _ in $(seq 1 300); do
    grep -q "train 2/" "$tmp/int.err" 2>/dev/null && break
    sleep 0.1
done
kill -INT "$pid"
wait "$pid"
status=$?
[ "$status" -eq 130 ] && ok || bad "Ctrl-C: status $status, want 130"
has int.err "interrupted at step"
[ -s "$tmp/int.safetensors" ] && ok || bad "Ctrl-C saved no checkpoint"

# --- the embedding example ---------------------------------------------------
if "$embed" "$tmp/m.safetensors" >"$tmp/embed.out" 2>"$tmp/embed.err"; then ok; else
    bad "embed (status $?)"
    sed 's/^/  | /' "$tmp/embed.err"
fi
has embed.out "class 9:"

# --- a text model: bytes stream and chars sequences ------------------------
i=0
while [ $i -lt 40 ]; do
    echo "the cat sat on the mat. the dog sat on the log. $i"
    i=$((i + 1))
done >"$tmp/corpus.txt"
run prep_bytes prepare --out "$tmp/bytes" "$tmp/corpus.txt"
has prep_bytes.out "(stream)"
# one document per line (--split-at ''), so that every 5th goes to validation
sed 'G' "$tmp/corpus.txt" >"$tmp/paragraphs.txt"
run prep_chars prepare --tokenizer chars --seq-len 32 --val-fraction 0.2 --split-at '' \
    --out "$tmp/chars" "$tmp/paragraphs.txt"
has prep_chars.out "chars"
has prep_chars.out "val.bin .* sequences of 32 tokens"
has prep_chars.out "40 documents"
run train_text train --data "$tmp/chars" --out "$tmp/t.safetensors" $tiny --batch 4 --steps 5 \
    --process masked --eval-sequences 4 --eval-time-samples 2
run sample_prefix sample "$tmp/t.safetensors" --prefix "the cat" --suffix "log." --n 2 --steps 8
has sample_prefix.out "^the cat"
run sample_infill sample "$tmp/t.safetensors" --infill "the ___ sat on the ___." --steps 8
has sample_infill.out "^the "
has sample_infill.out " sat on the "
run train_stream train --data "$tmp/bytes" --out "$tmp/b.safetensors" $tiny --batch 2 --steps 3 \
    --seq-len 48 --process mixture --eval-sequences 2 --eval-time-samples 2
run info_stream info "$tmp/b.safetensors"
has info_stream.out "bytes, 256 tokens"
has info_stream.out "mixture process"

echo "cli_end_to_end: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
