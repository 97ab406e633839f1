#!/usr/bin/python3
"""Adds up meson testlog.json files (one JSON object per line) and prints one
line "tests: N passed, N failed, N skipped". Exits non-zero on any failure or
when no test ran at all."""
import json
import sys

passed = failed = skipped = 0
failures = []
for path in sys.argv[1:]:
    try:
        lines = open(path).read().splitlines()
    except OSError:
        failed += 1
        failures.append(path + " (missing: the suite did not run)")
        continue
    for line in lines:
        if not line.strip():
            continue
        r = json.loads(line)
        result = r.get("result", "")
        if result in ("OK", "EXPECTEDFAIL"):
            passed += 1
        elif result == "SKIP":
            skipped += 1
        else:
            failed += 1
            failures.append("%s (%s)" % (r.get("name"), result))
for f in failures:
    print("failed:", f)
print("tests: %d passed, %d failed, %d skipped" % (passed, failed, skipped))
sys.exit(1 if failed or passed == 0 else 0)
