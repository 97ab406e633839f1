#!/bin/sh
# `nctmc prepare` on streamed corpora (docs/cli.md, "Corpora larger than
# memory"): JSON Lines with every kind of escape and bad lines, directories
# walked in name order, --split-at documents, the same shards for 1 and 4
# threads and any budget, the memory budget held (peak RSS), pipes, and
# the manifest: a mixed or truncated directory is refused by train.
#
#   test_prepare_stream.sh PATH/TO/nctmc [measure-rss|no-rss]
# (no-rss in sanitizer builds, whose shadow memory is no part of the budget)
set -u
nctmc=$1
rss_check=${2:-measure-rss}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
tiny="--layers 1 --d-model 16 --heads 2 --cond-dim 8 --threads 1 --batch 2 --warmup 1"

ok() { passed=$((passed + 1)); }
bad() {
    failed=$((failed + 1))
    echo "FAIL: $*"
}
check() {
    what=$1
    shift
    if "$@"; then ok; else bad "$what"; fi
}
# prep NAME ARGS...: nctmc prepare, output kept in $tmp/NAME.out/.err
prep() {
    name=$1
    shift
    if "$nctmc" prepare "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"; then ok; else
        bad "prepare $* (status $?)"
        sed 's/^/  | /' "$tmp/$name.err" | tail -8
    fi
}
# body DIR SHARD: the shard's tokens (byte tokenizer: the text itself)
body() { tail -c +49 "$1/$2"; }
same_body() {
    body "$1" train.bin >"$tmp/got"
    if cmp -s "$tmp/got" "$2"; then ok; else
        bad "$3"
        od -c "$tmp/got" | head -8 | sed 's/^/  got | /'
        od -c "$2" | head -8 | sed 's/^/ want | /'
    fi
}

# --- JSON Lines: escapes, surrogate pairs, nested values, bad lines --------
{
    printf '%s\n' '{"text": "a\"b\\c\/d\n\te\u0041"}'
    printf '%s\n' '{"id": 1, "text": "\u00e9\ud83d\ude00 \ud800x\udc00"}'
    printf '%s\n' '{"meta": {"a": [1, -2.5e3, {"b": "}"}], "t": true, "n": null}, "text": "nested ok"}'
    printf '%s\n' '{"te\u0078t": "key escape", "text": "second is ignored"}'
    printf '%s\n' '' '   '
    printf '%s\n' 'not json' '{"text": 5}' '{"other": "x"}' '{"text": "unterminated'
    printf '%s\n' '{"text": "trailing"} x' '{"text": "raw	tab"}'
    printf '%s' '{"text": "no final newline"}'
} >"$tmp/in.jsonl"
prep jsonl --jsonl-field text --val-fraction 0 --out "$tmp/j" "$tmp/in.jsonl"
printf 'a"b\\c/d\n\teA\n\n\303\251\360\237\230\200 \357\277\275x\357\277\275\n\nnested ok\n\nkey escape\n\nno final newline\n\n' >"$tmp/want"
same_body "$tmp/j" "$tmp/want" "JSON Lines decoded: escapes, pairs, lone surrogates as U+FFFD"
check "six bad records counted and the first located" \
    grep -q "skipped 6 JSON Lines records.*in.jsonl:7: not a JSON object" "$tmp/jsonl.err"
check "the manifest counts them" grep -q "documents=5 segments=5 bad_lines=6" "$tmp/j/manifest.txt"

# a record with invalid UTF-8 is not JSON either: with the chars tokenizer
# (which needs UTF-8) it is skipped and located like any bad record, not
# the end of the run (issue 37, item 5)
printf '{"text": "good \303\251"}\n{"text": "bad \377 byte"}\n{"text": "over\300\257long"}\n{"text": "fine"}\n' \
    >"$tmp/utf8.jsonl"
prep utf8 --tokenizer chars --jsonl-field text --val-fraction 0 --out "$tmp/u" "$tmp/utf8.jsonl"
check "invalid UTF-8 records are skipped, counted and located" \
    grep -q "skipped 2 JSON Lines records.*utf8.jsonl:2: invalid UTF-8 in a string" "$tmp/utf8.err"

# plain text for the chars tokenizer: a line with invalid UTF-8 is skipped,
# counted and located (FILE:LINE), in both passes, and the run finishes with
# the rest (issue 37, item 5); characters cut by a 64 KiB read block or by
# the reader's line hold are whole characters, not bad lines
printf 'good \303\251\nbad \377 byte\nmore good\nover\300\257long\nend' >"$tmp/bad.txt"
prep badtxt --tokenizer chars --val-fraction 0 --out "$tmp/bt" "$tmp/bad.txt"
check "plain-text lines with invalid UTF-8 skipped, counted and located" \
    grep -q "skipped 2 lines with invalid UTF-8.*bad.txt:2: invalid UTF-8" "$tmp/badtxt.err"
# "good é\n" 7 + "more good\n" 10 + "end" 3 characters, and "\n\n" after
check "the rest kept (22 tokens)" grep -q "tokens=22 .*documents=1" "$tmp/bt/manifest.txt"
check "the manifest counts the bad lines" grep -q "bad_lines=2" "$tmp/bt/manifest.txt"
prep badfile --tokenizer-file "$tmp/bt/tokenizer.txt" --val-fraction 0 --out "$tmp/bf" \
    "$tmp/bad.txt"
check "the same with a chars tokenizer file" grep -q "tokens=22 .*documents=1" \
    "$tmp/bf/manifest.txt"
printf 'one\n%%\nb\377d\ntwo\n%%\nthree\n' >"$tmp/badsplit.txt"
prep badsplit --tokenizer chars --split-at % --val-fraction 0 --out "$tmp/bs" "$tmp/badsplit.txt"
check "--split-at: the bad line leaves its document" \
    grep -q "skipped 1 line with invalid UTF-8.*badsplit.txt:3: invalid UTF-8" "$tmp/badsplit.err"
check "--split-at: three documents" grep -q "documents=3 segments=3 bad_lines=1" \
    "$tmp/bs/manifest.txt"
# 30000 lines of 7 characters (14 bytes) after one byte: characters
# straddle the 64 KiB read blocks (bytes 65536 and 131072 fall inside é)
line=$(printf '\303\251t\303\251 \342\202\254\360\235\204\236')
{ printf x; yes "$line" | head -n 30000; } >"$tmp/straddle.txt"
prep straddle --tokenizer chars --val-fraction 0 --out "$tmp/st" "$tmp/straddle.txt"
check "characters across read blocks are valid (210003 tokens)" \
    grep -q "tokens=210003 .*documents=1" "$tmp/st/manifest.txt"
check "and no line is bad" grep -q "bad_lines=0" "$tmp/st/manifest.txt"
# a line longer than the hold (64 KiB) whose euro sign is cut by it; and one
# with an invalid byte past the hold: its start is kept, the rest dropped
{ head -c 65535 /dev/zero | tr '\0' a; printf '\342\202\254\nz'; } >"$tmp/longline.txt"
prep longline --tokenizer chars --val-fraction 0 --out "$tmp/ll" "$tmp/longline.txt"
check "a character cut by the line hold is valid (65540 tokens)" \
    grep -q "tokens=65540 " "$tmp/ll/manifest.txt"
check "and no line is bad" grep -q "bad_lines=0" "$tmp/ll/manifest.txt"
{ head -c 70000 /dev/zero | tr '\0' a; printf '\377bbbb\ntail\n'; } >"$tmp/longbad.txt"
prep longbad --tokenizer chars --val-fraction 0 --out "$tmp/lb" "$tmp/longbad.txt"
check "a long bad line located" grep -q "longbad.txt:1: invalid UTF-8 (in a line too long" \
    "$tmp/longbad.err"
# 70000 a, the line break, "tail\n", "\n\n"
check "its start kept, the rest dropped (70008 tokens)" grep -q "tokens=70008 " \
    "$tmp/lb/manifest.txt"

# numbers with a leading zero are not JSON (RFC 8259): bad records, counted
# (issue 37, item 5)
printf '%s\n' '{"id": 01, "text": "lead"}' '{"id": -007, "text": "lead"}' \
    '{"id": 0, "n": -0.5e01, "text": "good"}' >"$tmp/zero.jsonl"
prep zero --jsonl-field text --val-fraction 0 --out "$tmp/z" "$tmp/zero.jsonl"
check "leading zeros are bad records" \
    grep -q "skipped 2 JSON Lines records.*zero.jsonl:1: a number with a leading zero" \
    "$tmp/zero.err"

# --- directories: name order, hidden files skipped, a file is a document --
mkdir -p "$tmp/tree/sub" "$tmp/tree/.git"
printf 'B\n' >"$tmp/tree/b.txt"
printf 'A\n' >"$tmp/tree/a.txt"
printf 'C' >"$tmp/tree/sub/c.txt"
printf 'H\n' >"$tmp/tree/.hidden.txt"
printf 'G\n' >"$tmp/tree/.git/x"
: >"$tmp/tree/empty.txt"
prep tree --val-fraction 0 --out "$tmp/t" "$tmp/tree"
printf 'A\n\n\nB\n\n\nC\n\n' >"$tmp/want"
same_body "$tmp/t" "$tmp/want" "a directory: a.txt, b.txt, sub/c.txt in order, hidden and empty left out"
check "the manifest lists the sources" grep -q "source 1 .*tree/sub/c.txt" "$tmp/t/manifest.txt"

# links (issue 37, item 5): a file reached again through a link is one
# document, not two (it would land in both splits); dangling links and
# links to directories (a loop here) are skipped and reported
mkdir -p "$tmp/linked/sub"
printf 'A\n' >"$tmp/linked/a.txt"
printf 'B\n' >"$tmp/linked/sub/b.txt"
ln -s ../a.txt "$tmp/linked/sub/z-link-to-a.txt"
ln -s nowhere.txt "$tmp/linked/dangling.txt"
ln -s .. "$tmp/linked/sub/loop"
prep linked --val-fraction 0 --out "$tmp/l" "$tmp/linked" "$tmp/linked/a.txt"
printf 'A\n\n\nB\n\n\n' >"$tmp/want"
same_body "$tmp/l" "$tmp/want" "a file and links to it: one document"
check "two documents" grep -q "documents=2 " "$tmp/l/manifest.txt"
check "duplicates reported" grep -q "2 inputs skipped as the same file as an earlier one" \
    "$tmp/linked.err"
check "dangling links reported" grep -q "1 dangling link skipped (first: .*dangling.txt)" \
    "$tmp/linked.err"
check "links to directories reported" grep -q "1 link to directories skipped.*sub/loop" \
    "$tmp/linked.err"

# --- --split-at: a line ends a document and is dropped ----------------------
printf 'one\n%%\ntwo\n%%\r\n\nthree\n%%x\n%%' >"$tmp/fortunes"
prep split --split-at % --val-fraction 0 --out "$tmp/s" "$tmp/fortunes"
printf 'one\n\n\ntwo\n\n\n\nthree\n%%x\n\n\n' >"$tmp/want"
same_body "$tmp/s" "$tmp/want" "--split-at %: documents between % lines (CRLF too)"
printf 'p1 line\nmore\n\n\np2\n \np3' >"$tmp/paragraphs"
prep blank --split-at '' --val-fraction 0 --out "$tmp/b" "$tmp/paragraphs"
printf 'p1 line\nmore\n\n\np2\n \np3\n\n' >"$tmp/want"
same_body "$tmp/b" "$tmp/want" "--split-at '': blank lines end documents, a line of a space does not"
check "two documents" grep -q "documents=2 " "$tmp/b/manifest.txt"

# --- the same shards for 1 and 4 threads and any budget -----------------------
i=0
while [ $i -lt 400 ]; do
    printf '{"text": "document %d: the cat sat on the mat.\\n\\u00e9t\\u00e9 %d"}\n' $i $((i * 7))
    i=$((i + 1))
done >"$tmp/many.jsonl"
# one long document without many cut places, and one long line of words
yes 'the quick brown fox jumps over the lazy dog, again and again' | head -c 2000000 >"$tmp/long.txt"
head -c 300000 /dev/zero | tr '\0' 'x' >"$tmp/nospace.txt"
# 2.3 MB of text: about 9 chunks of 270 kB at 40 MB and 1 thread, one chunk
# of 6 MB at 300 MB and 4 threads
for threads in 1 4; do
    mem=$([ $threads = 1 ] && echo 40 || echo 300)
    prep "det$threads" --tokenizer chars --seq-len 64 --val-fraction 0.1 --threads $threads \
        --memory-mb $mem --out "$tmp/d$threads" "$tmp/long.txt" "$tmp/nospace.txt" "$tmp/many.jsonl"
    prep "detj$threads" --jsonl-field text --threads $threads --memory-mb $mem \
        --out "$tmp/dj$threads" "$tmp/many.jsonl"
done
for f in train.bin val.bin tokenizer.txt manifest.txt; do
    check "$f: 1 thread (40 MB) and 4 threads (300 MB) give the same bytes" \
        cmp -s "$tmp/d1/$f" "$tmp/d4/$f"
    check "$f of JSON Lines: the same for 1 and 4 threads" cmp -s "$tmp/dj1/$f" "$tmp/dj4/$f"
done
check "the validation split took every 10th segment" grep -q "shard val.bin" "$tmp/d1/manifest.txt"

# --- a requested validation share is honoured or refused (issue 34) ----------
# one 480 kB stream: 8 segments of 64 KiB would give --val-fraction 0.05
# none; smaller segments give it its share
yes 'a line of a small corpus, repeated, with some words in it' | head -c 480000 \
    >"$tmp/small.txt"
prep share --val-fraction 0.05 --out "$tmp/share" "$tmp/small.txt"
check "a 480 kB stream gets a validation shard for --val-fraction 0.05" \
    test -f "$tmp/share/val.bin"
n_val=$(sed -n 's/^ *val.bin *\([0-9]*\) tokens.*/\1/p' "$tmp/share.out")
n_train=$(sed -n 's/^ *train.bin *\([0-9]*\) tokens.*/\1/p' "$tmp/share.out")
check "holding 4 to 6% of the tokens (${n_val:-?} of ${n_train:-?} + ${n_val:-?})" \
    test $((100 * ${n_val:-0})) -ge $((4 * (${n_train:-0} + ${n_val:-0}))) -a \
    $((100 * ${n_val:-0})) -le $((6 * (${n_train:-0} + ${n_val:-0})))
# through a pipe the size is unknown ahead: 64 KiB segments, none for
# validation, and the requested share is refused, not dropped silently
if cat "$tmp/small.txt" | "$nctmc" prepare --val-fraction 0.05 --out "$tmp/share-pipe" \
    /dev/stdin >/dev/null 2>"$tmp/share-pipe.err"; then
    bad "a validation share the input cannot give accepted"
else
    check "a validation share the input cannot give is refused" \
        grep -q "gives no validation split" "$tmp/share-pipe.err"
    check "and leaves no directory" test ! -e "$tmp/share-pipe"
fi
printf 'ten bytes\n' >"$tmp/tiny.txt"
if "$nctmc" prepare --val-fraction 0.1 --out "$tmp/tiny" "$tmp/tiny.txt" >/dev/null \
    2>"$tmp/tiny.err"; then
    bad "--val-fraction 0.1 of ten bytes accepted"
else
    check "--val-fraction 0.1 of ten bytes is refused" grep -q "no validation split" "$tmp/tiny.err"
fi
prep tiny-default --out "$tmp/tiny" "$tmp/tiny.txt"
check "the default share (not requested) of ten bytes is left out with a note" \
    grep -q "too little data" "$tmp/tiny-default.out"

# --- the budget -----------------------------------------------------------------
if "$nctmc" prepare --memory-mb 8 --out "$tmp/m" "$tmp/long.txt" >/dev/null 2>"$tmp/m.err"; then
    bad "--memory-mb 8 accepted"
else
    check "a budget too small is refused up front" grep -q "too little" "$tmp/m.err"
fi
if [ -x /usr/bin/time ] && [ "$rss_check" = measure-rss ]; then
    yes 'a line of text, repeated to make a corpus of forty megabytes.' | head -c 40000000 \
        >"$tmp/big.txt"
    /usr/bin/time -v "$nctmc" prepare --memory-mb 48 --threads 2 --out "$tmp/big" \
        "$tmp/big.txt" >/dev/null 2>"$tmp/time.err" || bad "prepare of 40 MB"
    rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$tmp/time.err")
    echo "prepare of 40 MB with --memory-mb 48: peak RSS $rss kB"
    check "40 MB of text in a 48 MB budget: peak RSS ${rss:-?} kB stays under 48 MB" \
        test "${rss:-999999}" -lt 49152
    rm -f "$tmp/big.txt"
    rm -rf "$tmp/big"
fi

# --- pipes ------------------------------------------------------------------------
mkfifo "$tmp/fifo"
(printf 'from a pipe\n' >"$tmp/fifo") &
prep fifo --val-fraction 0 --out "$tmp/p" "$tmp/fifo"
wait
printf 'from a pipe\n\n\n' >"$tmp/want"
same_body "$tmp/p" "$tmp/want" "a FIFO streams in"
if "$nctmc" prepare --tokenizer chars --out "$tmp/p2" "$tmp/fifo" >/dev/null 2>"$tmp/p2.err"; then
    bad "chars over a FIFO accepted"
else
    check "chars (two passes) refuses a pipe" grep -q "not a regular file" "$tmp/p2.err"
fi

# --- the manifest: readers refuse a mixed or damaged directory -----------------------
train() { "$nctmc" train --data "$1" --out "$tmp/m.st" $tiny --steps 1 --eval-every 0 \
    >"$tmp/train.out" 2>"$tmp/train.err"; }
check "a consistent directory trains" train "$tmp/d1"
cp -r "$tmp/d1" "$tmp/mixed"
cp "$tmp/d4/val.bin" "$tmp/mixed/val.bin" # same bytes: still consistent
check "an identical copy is accepted" train "$tmp/mixed"
prep other --tokenizer chars --seq-len 64 --out "$tmp/other" "$tmp/long.txt"
cp "$tmp/other/train.bin" "$tmp/mixed/train.bin"
if train "$tmp/mixed"; then bad "a train.bin of another run accepted"; else
    check "a train.bin of another run is refused" grep -q "does not match" "$tmp/train.err"
fi
cp "$tmp/d1/train.bin" "$tmp/mixed/train.bin"
cp "$tmp/other/tokenizer.txt" "$tmp/mixed/tokenizer.txt"
if train "$tmp/mixed"; then bad "a tokenizer of another run accepted"; else
    check "a tokenizer of another run is refused" grep -q "hash differs" "$tmp/train.err"
fi
cp "$tmp/d1/tokenizer.txt" "$tmp/mixed/tokenizer.txt"
head -c -1 "$tmp/d1/val.bin" >"$tmp/mixed/val.bin"
if train "$tmp/mixed"; then bad "a truncated val.bin accepted"; else
    check "a truncated shard is refused" grep -q "truncated" "$tmp/train.err"
fi
cp -r "$tmp/j" "$tmp/extra"
cp "$tmp/d1/val.bin" "$tmp/extra/val.bin"
if train "$tmp/extra"; then bad "an unlisted val.bin accepted"; else
    check "a shard the manifest does not list is refused" grep -q "is not in" "$tmp/train.err"
fi
rm "$tmp/mixed/manifest.txt"
cp "$tmp/d1/val.bin" "$tmp/mixed/val.bin"
check "a directory without a manifest (an older prepare) still trains" train "$tmp/mixed"

echo "cli_prepare_stream: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
