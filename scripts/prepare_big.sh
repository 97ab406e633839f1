#!/bin/sh
# Shows that `nctmc prepare` holds its memory budget on a corpus of any size
# (docs/performance.md, "Preparing a corpus larger than memory"): generates
# SIZE_MB of JSON Lines text (random words, escapes, accented letters) into a
# temporary directory, prepares it with /usr/bin/time -v, prints the peak
# resident memory and the tokens per second, and removes everything.
#
#   scripts/prepare_big.sh [BUILD_DIR] [-- extra prepare options]
#   SIZE_MB=1024 MEMORY_MB=512 THREADS=0 scripts/prepare_big.sh build
#   MEMORY_MB="512 64" scripts/prepare_big.sh build   # one run per budget
#
# Nothing is committed or kept: the corpus and the shards live in a mktemp
# directory (TMPDIR) removed on exit. Needs about 2 x SIZE_MB of disk.
set -eu
build=${1:-build}
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
size_mb=${SIZE_MB:-1024}
memory_mb=${MEMORY_MB:-512}
threads=${THREADS:-0}
nctmc=$build/examples/nctmc
[ -x "$nctmc" ] || { echo "no $nctmc: build first" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (apt install time)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

echo "generating $size_mb MB of JSON Lines in $tmp ..."
# records of 20 .. 2000 words; every 50th word carries an escape the
# reader must decode (\n, \", \u00e9)
awk -v target=$((size_mb * 1048576)) 'BEGIN {
    srand(11);
    n = split("the a of and to in is was that it for on with as he she they at by " \
              "this had from not but which be his her are or an were we all their " \
              "cat dog house river mountain story little big old new day night " \
              "ran walked said looked found made took came went saw knew thought", w, " ");
    esc[0] = "\\n"; esc[1] = "\\\""; esc[2] = "caf\\u00e9";
    bytes = 0;
    while (bytes < target) {
        k = 20 + int(rand() * 1980);
        line = "{\"id\": " NR++ ", \"text\": \"";
        for (i = 0; i < k; i++) {
            word = w[1 + int(rand() * n)];
            if (i % 50 == 49) word = word esc[i % 3];
            line = line (i ? " " : "") word;
        }
        line = line ".\"}";
        print line;
        bytes += length(line) + 1;
    }
}' >"$tmp/corpus.jsonl"
input=$(wc -c <"$tmp/corpus.jsonl")
over=0
for budget in $memory_mb; do
    rm -rf "$tmp/out"
    echo "prepare: $input bytes, --memory-mb $budget, --threads $threads"
    /usr/bin/time -v "$nctmc" prepare --jsonl-field text --memory-mb "$budget" \
        --threads "$threads" --progress --out "$tmp/out" "$@" "$tmp/corpus.jsonl" \
        >"$tmp/prepare.out" 2>"$tmp/time.err" || { cat "$tmp/prepare.out" "$tmp/time.err"; exit 1; }
    cat "$tmp/prepare.out"
    rss_kb=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$tmp/time.err")
    wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$tmp/time.err")
    cpu_user=$(sed -n 's/.*User time (seconds): //p' "$tmp/time.err")
    cpu_sys=$(sed -n 's/.*System time (seconds): //p' "$tmp/time.err")
    rate=$(sed -n 's/.* in \([0-9.]*\) s (\([0-9.e+]*\) tokens\/s.*/\2/p' "$tmp/prepare.out")
    echo "input $input bytes; train.bin $(wc -c <"$tmp/out/train.bin") bytes; manifest:"
    sed 's/^/  | /' "$tmp/out/manifest.txt"
    echo "peak RSS $rss_kb kB ($((rss_kb / 1024)) MiB) for a budget of $budget MB"
    echo "wall $wall, user ${cpu_user} s, system ${cpu_sys} s; $rate tokens/s"
    if [ "$rss_kb" -lt $((budget * 1024)) ]; then echo "within the budget"; else
        echo "OVER the budget" >&2
        over=1
    fi
done
exit $over
