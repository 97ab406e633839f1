#!/bin/sh
# The nctmc tool under hostile or unlucky paths and files (issue 10): outputs
# that are FIFOs, symbolic links, directories, missing or empty; outputs that
# are the command's own inputs; FIFOs as inputs; planted temporary-file
# links; concurrent writers; a killed writer's leftovers; a re-prepare over
# an older directory; control characters from files and paths.
#
#   test_hostile.sh PATH/TO/nctmc PATH/TO/digits.txt
set -u
nctmc=$1
digits=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
esc=$(printf '\033')

ok() { passed=$((passed + 1)); }
bad() {
    failed=$((failed + 1))
    echo "FAIL: $*"
    [ -f "$tmp/err" ] && sed 's/^/  | /' "$tmp/err" | tail -5
}
check() { # DESCRIPTION COMMAND...: the command succeeds
    what=$1
    shift
    if "$@"; then ok; else bad "$what"; fi
}

# expect STATUS TEXT -- ARGS...: nctmc ARGS exits with STATUS within 60 s
# (a FIFO must not block it) and TEXT occurs in its output (stdout or stderr)
expect() {
    want=$1 text=$2
    shift 3
    timeout 60 "$nctmc" "$@" >"$tmp/out" 2>"$tmp/err"
    status=$?
    if [ "$status" -eq "$want" ] && cat "$tmp/out" "$tmp/err" | grep -q -- "$text"; then
        ok
    else
        bad "nctmc $* -> status $status (want $want), '$text' in its output?"
    fi
}

# started: the command got past its checks into the work (it described the
# model it was about to train)
not_started() {
    if grep -q "^model:" "$tmp/err"; then bad "$1: the work started before the check"; else ok; fi
}

tiny="--layers 1 --d-model 16 --heads 2 --cond-dim 8 --threads 1 --batch 4 --warmup 1"
d="$tmp/d"
"$nctmc" prepare --digits "$digits" --out "$d" >/dev/null 2>"$tmp/err" || bad "prepare"
"$nctmc" train --data "$d" --out "$tmp/m.st" $tiny --steps 2 --eval-every 0 \
    --eval-sequences 4 --eval-time-samples 1 >/dev/null 2>"$tmp/err" || bad "train"
cp "$tmp/m.st" "$tmp/m.orig"
cp "$d/train.bin" "$tmp/train.orig"
mkfifo "$tmp/fifo"
mkdir "$tmp/adir"

# --- item 1: the writer replaces only regular files, writes through links --
expect 1 "FIFO, device or socket" -- train --data "$d" --out "$tmp/fifo" $tiny --steps 2
not_started "train --out FIFO"
check "the FIFO is still a FIFO" test -p "$tmp/fifo"
ln -s fifo "$tmp/to-fifo"
expect 1 "FIFO, device or socket" -- sample "$tmp/m.st" --out "$tmp/to-fifo"
ln -s nowhere/missing "$tmp/dangling"
expect 1 "symbolic link to nothing" -- train --data "$d" --out "$tmp/dangling" $tiny --steps 2
echo old >"$tmp/target.st"
ln -s target.st "$tmp/link.st"
expect 0 "finished" -- train --data "$d" --out "$tmp/link.st" $tiny --steps 2 --eval-every 0 \
    --eval-sequences 4 --eval-time-samples 1
check "the link stays a link" test -L "$tmp/link.st"
check "its target holds the checkpoint" test "$(wc -c <"$tmp/target.st")" -gt 1000

# --- item 3: an empty --out is refused, not read past ---------------------
expect 1 "empty" -- prepare --out "" "$digits"
expect 1 "empty" -- prepare --digits "$digits" --out ""

# --- item 4: prepare replaces its whole directory ---------------------------
check "val.bin is there" test -f "$d/val.bin"
expect 0 "train.bin" -- prepare --digits "$digits" --out "$d" --val-fraction 0
check "a re-prepare with --val-fraction 0 removes the stale val.bin" test ! -e "$d/val.bin"
check "and writes the rest" test -f "$d/train.bin" -a -f "$d/tokenizer.txt"
mkdir "$tmp/mixed"
echo mine >"$tmp/mixed/notes.txt"
expect 1 "prepare did not write" -- prepare --digits "$digits" --out "$tmp/mixed"
check "a directory with other files is left alone" test -f "$tmp/mixed/notes.txt"
expect 1 "which prepare replaces" -- prepare --out "$d" "$d/tokenizer.txt"
# a killed prepare's staging directory goes; one holding other files stays
mkdir "$tmp/d.tmp-AbC123" "$tmp/d.tmp-XyZ789"
echo x >"$tmp/d.tmp-AbC123/train.bin"
echo x >"$tmp/d.tmp-XyZ789/notes.txt"
touch -d "1 hour ago" "$tmp/d.tmp-AbC123" "$tmp/d.tmp-XyZ789"
expect 0 "val.bin" -- prepare --digits "$digits" --out "$d"
check "a dead prepare's staging directory is removed" test ! -e "$tmp/d.tmp-AbC123"
check "one holding other files is not" test -f "$tmp/d.tmp-XyZ789/notes.txt"
check "no staging directory of ours is left" test -z "$(ls "$tmp" | grep '^d\.tmp-' | grep -v XyZ789)"
check "the new val.bin is there" test -f "$d/val.bin"
# killed half-way (SIGXFSZ: train.bin outgrows the file size limit after the
# tokenizer was written): the old directory stays whole, and the next
# prepare removes the dead one's staging directory
cp -r "$d" "$tmp/d.before"
(ulimit -f 40 && exec "$nctmc" prepare --digits "$digits" --out "$d" --val-fraction 0) \
    >/dev/null 2>&1
check "a prepare killed half-way leaves the old directory as it was" diff -r "$d" "$tmp/d.before"
check "its staging directory is left" test -n "$(ls "$tmp" | grep '^d\.tmp-' | grep -v XyZ789)"
expect 0 "val.bin" -- prepare --digits "$digits" --out "$d"
check "the next prepare removes it" test -z "$(ls "$tmp" | grep '^d\.tmp-' | grep -v XyZ789)"

# --- item 6: the PNG goes through the library's writer -----------------------
echo precious >"$tmp/victim"
ln -s victim "$tmp/grid.png.tmp"
expect 0 "wrote a" -- sample "$tmp/m.st" --n 2 --steps 2 --png "$tmp/grid.png" --no-preview
check "a planted <png>.tmp link is not followed" test "$(cat "$tmp/victim")" = precious
check "the PNG is written" test "$(head -c 4 "$tmp/grid.png" | tail -c 3)" = PNG
mkdir "$tmp/race"
for i in 1 2 3 4; do
    "$nctmc" sample "$tmp/m.st" --n 3 --steps 2 --seed $i --png "$tmp/race/g.png" \
        --no-preview --threads 1 >/dev/null 2>&1 &
done
wait
check "concurrent PNG writers leave one file, no temporary ones" \
    test "$(ls "$tmp/race")" = g.png
check "and it is a whole PNG" test "$(tail -c 8 "$tmp/race/g.png" | head -c 4)" = IEND

# --- item 10: a killed writer's temporary file goes on the next save --------
echo partial >"$tmp/m.st.tmp-Dead01"
touch -d "1 hour ago" "$tmp/m.st.tmp-Dead01"
expect 0 "finished" -- train --data "$d" --resume "$tmp/m.st" --out "$tmp/m.st" --steps 3 \
    --eval-every 0 --eval-sequences 4 --eval-time-samples 1 --threads 1
check "the stale temporary file is removed" test ! -e "$tmp/m.st.tmp-Dead01"
cp "$tmp/m.st" "$tmp/m.orig"

# --- item 11: an output is never one of the inputs ---------------------------
expect 1 "is the input" -- sample "$tmp/m.st" --out "$tmp/m.st"
ln -s m.st "$tmp/alias.st"
expect 1 "is the input" -- sample "$tmp/m.st" --n 1 --png "$tmp/alias.st"
ln "$tmp/m.st" "$tmp/hardlink.st"
expect 1 "is the input" -- sample "$tmp/m.st" --out "$tmp/hardlink.st"
check "the checkpoint is intact" cmp -s "$tmp/m.st" "$tmp/m.orig"
expect 1 "is the input" -- train --data "$d" --out "$d/train.bin" $tiny --steps 2
not_started "train --out data/train.bin"
cp "$d/train.bin" "$tmp/train.orig"
check "the shard is intact" cmp -s "$d/train.bin" "$tmp/train.orig"
# issue 34: convert and train --out, compared with every input by device and
# inode (through symbolic and hard links)
for out in m.st alias.st hardlink.st; do
    expect 1 "is the input" -- convert "$tmp/m.st" --to bf16 --out "$tmp/$out"
done
check "convert left the float checkpoint intact" cmp -s "$tmp/m.st" "$tmp/m.orig"
expect 0 "linear weights" -- convert "$tmp/m.st" --to int8 --out "$tmp/m-int8.st"
cp "$d/manifest.txt" "$tmp/manifest.orig"
ln -s "$d/manifest.txt" "$tmp/manifest-link.txt"
for out in "$d/manifest.txt" "$tmp/manifest-link.txt" "$d/val.bin" "$d/tokenizer.txt"; do
    expect 1 "is the input" -- train --data "$d" --out "$out" $tiny --steps 2
    not_started "train --out $out"
done
check "the manifest is intact" cmp -s "$d/manifest.txt" "$tmp/manifest.orig"

# --- item 12: unusable outputs are found before the work ---------------------
expect 1 "the path is empty" -- train --data "$d" --out "" $tiny --steps 2
not_started "train --out ''"
expect 1 "No such file or directory" -- train --data "$d" --out "$tmp/nodir/m.st" $tiny --steps 2
not_started "train --out missing/dir"
expect 1 "a directory" -- train --data "$d" --out "$tmp/adir" $tiny --steps 2
not_started "train --out DIR"
expect 1 "No such file or directory" -- sample "$tmp/m.st" --out "$tmp/nodir/s.txt"
expect 1 "a directory" -- sample "$tmp/m.st" --png "$tmp/adir"
expect 1 "not a directory" -- prepare --digits "$digits" --out "$tmp/m.st"
expect 1 "No such file" -- eval "$tmp/nothing.st" --data "$d"
if [ "$(id -u)" -ne 0 ]; then
    mkdir "$tmp/ro" && chmod 555 "$tmp/ro"
    expect 1 "cannot write into" -- train --data "$d" --out "$tmp/ro/m.st" $tiny --steps 2
    not_started "train --out read-only/dir"
fi

# --- item 13: control characters from files and paths are escaped -----------
mkdir "$tmp/evil"
cp "$d/train.bin" "$tmp/evil/train.bin"
printf 'nctmc-tokenizer 1\n\033]0;owned\007kind image\n' >"$tmp/evil/tokenizer.txt"
expect 1 "x1b" -- train --data "$tmp/evil" --out "$tmp/e.st" $tiny --steps 2
check "no raw escape byte reaches stderr" test "$(grep -c "$esc" "$tmp/err")" -eq 0
expect 1 "x1b\[2J" -- info "$tmp/no${esc}[2Jsuch.st"
check "not from a path either" test "$(grep -c "$esc" "$tmp/err")" -eq 0

# samples of a model whose tokenizer holds ESC and BEL: escaped on a
# terminal (a pseudo-terminal by script(1)), as they are into a pipe
if command -v script >/dev/null 2>&1; then
    for i in 1 2 3 4 5 6 7 8; do printf 'ab\033[31mcd\033]0;t\007ef\n'; done >"$tmp/evil.txt"
    "$nctmc" prepare --tokenizer chars --seq-len 16 --val-fraction 0 --out "$tmp/tx" \
        "$tmp/evil.txt" >/dev/null 2>&1 &&
        "$nctmc" train --data "$tmp/tx" --out "$tmp/tx.st" $tiny --steps 1 --eval-every 0 \
            >/dev/null 2>&1 || bad "a text model with control characters"
    # (stderr stays out: the progress bar draws with escape sequences)
    script -qec "'$nctmc' sample '$tmp/tx.st' --n 8 --steps 2 --threads 1 2>/dev/null" \
        /dev/null >"$tmp/tty.out" 2>&1
    check "samples on a terminal show control characters escaped" grep -q 'x1b' "$tmp/tty.out"
    check "and carry no raw escape byte" test "$(grep -c "$esc" "$tmp/tty.out")" -eq 0
    "$nctmc" sample "$tmp/tx.st" --n 8 --steps 2 --threads 1 >"$tmp/pipe.out" 2>/dev/null
    check "into a pipe the text is as it is" test "$(grep -c "$esc" "$tmp/pipe.out")" -gt 0
fi

# --- item 14: a FIFO as an input fails at once, not blocks -----------------
expect 1 "not a regular file" -- info "$tmp/fifo"
expect 1 "not a regular file" -- sample "$tmp/fifo"
expect 1 "not a regular file" -- eval "$tmp/m.st" --shard "$tmp/fifo"
expect 1 "not a regular file" -- train --data "$d" --resume "$tmp/fifo" --out "$tmp/r.st"
mkdir "$tmp/fifodata"
mkfifo "$tmp/fifodata/train.bin" "$tmp/fifodata/tokenizer.txt"
expect 1 "not a regular file" -- train --data "$tmp/fifodata" --out "$tmp/r.st"

# --- issue 37, item 6: a file truncated in place under a run ---------------
# train_truncated STATUS FLAGS...: trains on a copy of the data; once it has
# logged a step it is stopped, its shard truncated to 0 bytes in place and
# resumed. A mapped shard's lost pages kill it with SIGBUS (status 135);
# with --no-mmap it reads its own copy and finishes.
train_truncated() {
    want=$1
    shift
    rm -rf "$tmp/trunc" "$tmp/trunc.out"
    cp -r "$d" "$tmp/trunc"
    "$nctmc" train --data "$tmp/trunc" --out "$tmp/trunc.st" $tiny --steps 1500 \
        --eval-every 0 --eval-sequences 4 --eval-time-samples 1 --log-every 10 "$@" \
        >"$tmp/trunc.out" 2>&1 &
    pid=$!
    for _ in $(seq 300); do
        grep -q "^train " "$tmp/trunc.out" && break
        sleep 0.1
    done
    kill -STOP "$pid"
    : >"$tmp/trunc/train.bin"
    kill -CONT "$pid"
    wait "$pid"
    status=$?
    # a sanitizer's runtime catches SIGBUS itself and exits 1 with its report
    if [ "$status" -eq "$want" ] ||
        { [ -n "${NCTMC_TEST_SANITIZED:-}" ] && [ "$want" -ne 0 ] && [ "$status" -ne 0 ]; }; then
        ok
    else
        bad "train $* on a truncated shard: status $status, want $want"
    fi
}
train_truncated 135
train_truncated 0 --no-mmap
# a checkpoint read with --no-mmap is not mapped while the run uses it
maps_of_sample() {
    mkfifo "$tmp/mapfifo"
    "$nctmc" sample "$tmp/m.st" --n 3000 --batch 1 --steps 2 --threads 1 "$@" \
        >"$tmp/mapfifo" 2>/dev/null &
    pid=$!
    exec 3<"$tmp/mapfifo"
    sleep 1 # the sampler fills the pipe and waits: the model is loaded
    grep -c "$tmp/m.st" "/proc/$pid/maps"
    cat <&3 >/dev/null
    exec 3<&-
    wait "$pid"
    rm -f "$tmp/mapfifo"
}
if [ -r /proc/self/maps ]; then
    check "a loaded checkpoint is mapped" test "$(maps_of_sample)" -gt 0
    check "with --no-mmap it is not" test "$(maps_of_sample --no-mmap)" -eq 0
fi
for cmd in train sample eval info tokenize convert; do
    "$nctmc" "$cmd" --help | grep -q -- "--no-mmap" && ok || bad "$cmd --help lacks --no-mmap"
done

# --- issue 37, item 4: resuming on data that cannot train the checkpoint ---
# is refused from the checkpoint's header, before the model and its
# workspace (batch x 4096 tokens of activations) are allocated
head -c 6000 /dev/urandom | od -An -tx1 | tr -d ' \n' | head -c 5000 >"$tmp/long.txt"
head -c 64 "$tmp/long.txt" >"$tmp/short.txt"
"$nctmc" prepare --tokenizer bytes --val-fraction 0 --out "$tmp/long" "$tmp/long.txt" \
    >/dev/null 2>&1 || bad "prepare long"
"$nctmc" prepare --tokenizer-file "$tmp/long/tokenizer.txt" --val-fraction 0 --out "$tmp/short" \
    "$tmp/short.txt" >/dev/null 2>&1 || bad "prepare short"
"$nctmc" train --data "$tmp/long" --out "$tmp/L4096.st" $tiny --batch 1 --seq-len 4096 \
    --steps 1 --eval-every 0 >/dev/null 2>&1 || bad "train L = 4096"
# with the bytes the trainer would have allocated (nctmc_trainer_memory)
expect 1 "fewer than one sequence of 4096 (refused before allocating the trainer's [0-9.]* MB: [1-9][0-9]* bytes of gradients, optimizer state and workspace for 1 sequences x 4096 tokens" \
    -- train --data "$tmp/short" --resume "$tmp/L4096.st" --out "$tmp/r.st" --steps 5
not_started "resume on a 64-token stream"

echo "cli_hostile: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
