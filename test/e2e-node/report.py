#!/usr/bin/env python3
"""Summarise the node e2e suite's ginkgo JUnit reports against expected-failures.txt.

Usage: report.py [--partial] [--name NAME] EXPECTED_FAILURES_TXT JUNIT_XML...
  --partial  a subset ran: do not list expected-failure lines whose spec did not run
  --name     the suite's name that starts each line (default e2e-node; test/cluster's
             conformance.sh says conformance)

expected-failures.txt: one line per spec, "<substring of the spec's full name> # reason";
blank lines and lines starting with # are ignored. A failed spec is expected when one of the
substrings occurs in its name at word boundaries.

Prints "e2e-node: N passed, N failed, N skipped" (and per report), then the unexpected
failures with their messages, and the expected failures that now pass.
Exit status: 0 when every failure is expected, 1 otherwise, 2 on a missing or empty report.
"""

import argparse
import os
import re
import sys
import xml.etree.ElementTree as ET

FAILED = {"failed", "panicked", "interrupted", "aborted", "timedout"}
SKIPPED = {"skipped", "pending"}
MAX_MESSAGE_LINES = 10


def load_expected(path):
    entries = []
    with open(path, encoding="utf-8") as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            pattern, _, reason = line.partition(" # ")
            pattern = pattern.strip()
            if not pattern:
                continue
            regex = re.compile(r"(?<![A-Za-z0-9_])" + re.escape(pattern) + r"(?![A-Za-z0-9_])")
            entries.append((lineno, pattern, reason.strip(), regex))
    return entries


def status_of(case):
    status = case.get("status")
    if status:
        return status
    if case.find("failure") is not None or case.find("error") is not None:
        return "failed"
    if case.find("skipped") is not None:
        return "skipped"
    return "passed"


def failure_message(case):
    for tag in ("failure", "error"):
        node = case.find(tag)
        if node is not None:
            body = (node.get("message") or "").strip() or (node.text or "").strip()
            if body.startswith("[FAILED] "):
                body = body[len("[FAILED] "):]
            return body
    return ""


def short(text):
    lines = [l for l in text.splitlines() if l.strip()]
    if len(lines) > MAX_MESSAGE_LINES:
        lines = lines[:MAX_MESSAGE_LINES] + ["... (see the junit report)"]
    return "\n".join("      " + l for l in lines)


def read_report(path):
    passed, failed, skipped = [], [], []
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        name = case.get("name", "")
        if name.startswith("[It] "):
            name = name[len("[It] "):]
        status = status_of(case)
        # Suite nodes ([BeforeSuite], [SynchronizedAfterSuite], ...) count only when they fail.
        is_spec = not re.match(r"^\[(Synchronized)?(Before|After|Report)", name)
        if status in FAILED:
            failed.append((name, failure_message(case)))
        elif not is_spec:
            continue
        elif status in SKIPPED:
            skipped.append(name)
        else:
            passed.append(name)
    return passed, failed, skipped


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--partial", action="store_true")
    parser.add_argument("--name", default="e2e-node")
    parser.add_argument("expected")
    parser.add_argument("junit", nargs="+")
    opts = parser.parse_args()
    expected = load_expected(opts.expected)

    passed, failed, skipped = [], [], []
    for path in opts.junit:
        try:
            p, f, s = read_report(path)
        except (OSError, ET.ParseError) as e:
            print(f"{opts.name}: cannot read the junit report {path}: {e}", file=sys.stderr)
            return 2
        print(f"{opts.name}: {os.path.basename(path)}: {len(p)} passed, {len(f)} failed, {len(s)} skipped")
        passed += p
        failed += f
        skipped += s

    def matches(name):
        return [e for e in expected if e[3].search(name)]

    unexpected = [(n, m) for n, m in failed if not matches(n)]
    expected_failed = [(n, m) for n, m in failed if matches(n)]
    used = {e[0] for n, _ in expected_failed for e in matches(n)}

    print(f"{opts.name}: {len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped")
    print(f"{opts.name}: {len(expected_failed)} expected failures, {len(unexpected)} unexpected")
    if expected_failed:
        print(f"\nExpected failures ({len(expected_failed)}):")
        for name, _ in expected_failed:
            print(f"  - {name}  # {matches(name)[0][2]}")
    if unexpected:
        print(f"\nUNEXPECTED FAILURES ({len(unexpected)}):")
        for name, msg in unexpected:
            print(f"  - {name}")
            if msg:
                print(short(msg))

    now_passing, unmatched = [], []
    for lineno, pattern, reason, regex in expected:
        if lineno in used:
            continue
        hits = [n for n in passed if regex.search(n)]
        if hits:
            now_passing.append((lineno, pattern, hits))
        else:
            unmatched.append((lineno, pattern))
    if now_passing:
        print(f"\nExpected failures that now PASS ({len(now_passing)}); remove them from {opts.expected}:")
        for lineno, pattern, hits in now_passing:
            print(f"  - line {lineno}: {pattern}  ({len(hits)} passing spec(s))")
    if unmatched and not opts.partial:
        print(f"\nExpected-failure lines that match no failed spec ({len(unmatched)}; skipped or not run):")
        for lineno, pattern in unmatched:
            print(f"  - line {lineno}: {pattern}")

    if not passed and not failed:
        print(f"{opts.name}: the reports hold no spec results", file=sys.stderr)
        return 2
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
