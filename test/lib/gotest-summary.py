#!/usr/bin/env python3
"""Reads `go test -json` on stdin and prints what a person reads: each package's result, the whole
output of every failed test (and of a package that failed outside its tests, a build failure
included), and the slowest tests. The integration steps of the gate pipe their run through it.

Usage: go test -json ... | gotest-summary.py [--slowest N] [--save FILE]
  --slowest N  list the N slowest top-level tests (default 12)
  --save FILE  also write every test's full output there, for reading a pass later
Exit status: 1 when a test or package failed or the input held no result, else 0 (the caller
also checks go test's own status).
"""

import argparse
import json
import sys
from collections import defaultdict


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--slowest", type=int, default=12)
    parser.add_argument("--save")
    opts = parser.parse_args()
    save = open(opts.save, "w", encoding="utf-8") if opts.save else None

    output = defaultdict(list)  # (package, test) -> lines; test "" is the package's own
    elapsed = {}  # (package, test) -> seconds, top-level tests that ended
    failed_tests, failed_pkgs, results = [], [], 0
    running = set()  # (package, test): top-level tests that started and have not ended
    for raw in sys.stdin:
        line = raw.rstrip("\n")
        try:
            ev = json.loads(line)
        except ValueError:
            print(line)  # not an event: go's own messages (a build failure before -json starts)
            continue
        action, pkg, test = ev.get("Action"), ev.get("Package", ""), ev.get("Test", "")
        if action == "build-output":  # the compiler's errors: short, and all there is to read
            print(ev.get("Output", ""), end="")
            continue
        if action == "output":
            text = ev.get("Output", "")
            # A subtest's lines go with its top-level test, whose failure prints them all.
            output[(pkg, test.split("/")[0])].append(text)
            if save:
                save.write(text)
            continue
        if action == "run" and "/" not in test:
            running.add((pkg, test))
        if action not in ("pass", "fail", "skip"):
            continue
        if test:
            if "/" not in test:
                running.discard((pkg, test))
                elapsed[(pkg, test)] = ev.get("Elapsed", 0)
            if action == "fail" and "/" not in test:
                failed_tests.append((pkg, test))
                print("".join(output[(pkg, test)]), end="")
            continue
        results += 1
        status = {"pass": "ok  ", "fail": "FAIL", "skip": "?   "}[action]
        print(f"{status}\t{pkg}\t{ev.get('Elapsed', 0):.1f}s")
        if action == "fail":
            failed_pkgs.append(pkg)
            # Tests that never ended (a timeout or a panic ended the binary), then what the
            # package printed outside any test: the panic, the timeout's dump.
            for key in sorted(k for k in running if k[0] == pkg):
                print("".join(output[key]), end="")
            print("".join(output[(pkg, "")]), end="")

    if elapsed:
        slow = sorted(elapsed.items(), key=lambda kv: kv[1], reverse=True)[: opts.slowest]
        total = sum(elapsed.values())
        print(f"\n{len(elapsed)} tests, {total:.0f}s in all; the slowest:")
        for (pkg, test), secs in slow:
            print(f"  {secs:7.1f}s  {test}")
    if failed_tests:
        print(f"\nFAILED ({len(failed_tests)}): " + " ".join(t for _, t in failed_tests))
    if save:
        save.close()
    return 1 if failed_tests or failed_pkgs or results == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
