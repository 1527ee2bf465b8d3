#!/usr/bin/env python3
"""Summarise iscsi-test-cu output: real passes, skips (tests that print
[SKIPPED] yet count as passed) and failures, per test."""
import re, sys

def summarise(text):
    passed = skipped = failed = 0
    failures = []
    # Each test starts with "  Test: NAME ..." and ends with "passed" or "FAILED".
    for m in re.finditer(r"^  Test: (\S+) \.\.\.(.*?)(?=^  Test: |^Suite: |^Run Summary|\Z)", text, re.S | re.M):
        name, body = m.group(1), m.group(2)
        if "FAILED" in body.replace("[FAILED]", "") or re.search(r"^FAILED", body, re.M):
            failed += 1
            failures.append(name)
        elif "[SKIPPED]" in body:
            skipped += 1
        else:
            passed += 1
    return passed, skipped, failed, failures

if __name__ == "__main__":
    p, s, f, names = summarise(open(sys.argv[1]).read())
    label = sys.argv[2] if len(sys.argv) > 2 else sys.argv[1]
    print(f"{label}: {p} real passes, {s} skips, {f} failures")
    for n in names:
        print(f"  failed: {n}")
