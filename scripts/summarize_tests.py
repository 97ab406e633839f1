#!/usr/bin/python3
"""Adds up meson testlog.json files (one JSON object per line) and JUnit XML
files (pytest's --junitxml) and prints one line "tests: N passed, N failed,
N skipped". Exits non-zero on any failure or when no test ran at all."""
import json
import sys
import xml.etree.ElementTree as ET

passed = failed = skipped = 0
failures = []

def junit_cases(path):
    """(name, result) for every test case of a JUnit XML file."""
    for case in ET.parse(path).getroot().iter("testcase"):
        name = "%s::%s" % (case.get("classname"), case.get("name"))
        if case.find("failure") is not None or case.find("error") is not None:
            yield name, "FAIL"
        elif case.find("skipped") is not None:
            yield name, "SKIP"
        else:
            yield name, "OK"


for path in sys.argv[1:]:
    if path.endswith(".xml"):
        try:
            cases = list(junit_cases(path))
        except (OSError, ET.ParseError):
            cases = [(path + " (missing or unreadable: the suite did not run)", "FAIL")]
        for name, result in cases:
            if result == "OK":
                passed += 1
            elif result == "SKIP":
                skipped += 1
            else:
                failed += 1
                failures.append(name)
        continue
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
