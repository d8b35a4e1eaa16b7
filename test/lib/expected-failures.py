#!/usr/bin/env python3
"""The expected-failures matcher: ginkgo v2 JUnit reports judged against a list of known failures.

One script for every suite with such a list: critest (test/critest/run.sh, test/vm/critest.sh),
the node e2e suite (test/e2e-node/run.sh) and Conformance (test/cluster/conformance.sh).

Usage: expected-failures.py [--name NAME] [--partial] [--benchmark-dir DIR] EXPECTED JUNIT_XML...
  --name NAME          the suite's name that starts each line (default: critest)
  --partial            a focused or benchmark run: do not list expected-failure lines whose
                       spec did not run
  --benchmark-dir DIR  also print per-operation latencies from critest's benchmark data

EXPECTED: one line per spec, "<substring of the spec's full name> # reason"; blank lines and
lines starting with # are ignored. A failed spec is expected when one of the substrings occurs
in its name at word boundaries ("should support RunAsUser" does not match "should support
RunAsUserName").

Prints "NAME: N passed, N failed, N skipped" (per report when there are several, then in all),
the expected failures with their reasons, the unexpected failures with their messages, and the
expected failures that no longer fail (a hint to shrink the list).
Exit status: 0 when every failure is expected, 1 otherwise, 2 on a missing or empty report.
"""

import argparse
import glob
import json
import os
import re
import statistics
import sys
import xml.etree.ElementTree as ET

FAILED = {"failed", "panicked", "interrupted", "aborted", "timedout"}
SKIPPED = {"skipped", "pending"}
MAX_MESSAGE_LINES = 12
# Suite nodes ([BeforeSuite], [SynchronizedAfterSuite], [ReportAfterSuite], ...) count only
# when they fail.
SUITE_NODE = re.compile(r"^\[(Synchronized)?(Before|After|Report)")


def load_expected(path):
    entries = []
    with open(path, encoding="utf-8") as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            pattern, _, reason = line.partition(" # ")
            pattern = pattern.strip()
            if pattern.endswith(" #"):
                pattern = pattern[:-2].rstrip()
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
            # ginkgo's body is "[FAILED] <message>" plus where it failed; the attribute is
            # the message alone.
            body = (node.text or "").strip()
            if body.startswith("[FAILED] "):
                body = body[len("[FAILED] "):]
            return body or (node.get("message") or "").strip()
    return ""


def compact(text):
    """Drops gomega's dumps of Go values (the "{ ... }" blocks and "<*T | 0x...>:" lines)."""
    out, skip_indent = [], None
    for line in text.splitlines():
        stripped = line.strip()
        indent_len = len(line) - len(line.lstrip())
        if skip_indent is not None:
            if stripped == "}" and indent_len == skip_indent:
                skip_indent = None
            continue
        if stripped == "{":
            skip_indent = indent_len
            continue
        if re.match(r"^<[^>]*\| 0x[0-9a-f]+>:?\s*$", stripped):
            continue
        if stripped:
            out.append(line)
    return out


def indent(text, prefix="      "):
    lines = compact(text)
    if len(lines) > MAX_MESSAGE_LINES:
        lines = lines[:MAX_MESSAGE_LINES] + ["... (see the junit report)"]
    return "\n".join(prefix + l for l in lines)


def read_report(path):
    passed, failed, skipped = [], [], []
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        name = case.get("name", "")
        if name.startswith("[It] "):
            name = name[len("[It] "):]
        status = status_of(case)
        if status in FAILED:
            failed.append((name, failure_message(case)))
        elif SUITE_NODE.match(name):
            continue
        elif status in SKIPPED:
            skipped.append(name)
        else:
            passed.append(name)
    return passed, failed, skipped


def print_benchmarks(directory):
    files = sorted(glob.glob(os.path.join(directory, "*_benchmark_data.json")))
    if not files:
        return
    print("\nBenchmark latencies (ms):")
    print(f"  {'benchmark / operation':<44} {'n':>4} {'median':>9} {'p90':>9} {'max':>9}")
    for path in files:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            print(f"  {os.path.basename(path)}: unreadable: {e}")
            continue
        bench = os.path.basename(path)[: -len("_benchmark_data.json")]
        names = data.get("operationsNames") or []
        points = data.get("datapoints") or []
        for i, op in enumerate(names):
            values = sorted(p["operationsDurationsNs"][i] / 1e6 for p in points
                            if len(p.get("operationsDurationsNs") or []) > i)
            if not values:
                continue
            p90 = values[min(len(values) - 1, int(round(0.9 * (len(values) - 1))))]
            print(f"  {bench + ' / ' + op:<44} {len(values):>4} {statistics.median(values):>9.1f} "
                  f"{p90:>9.1f} {values[-1]:>9.1f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", default="critest")
    parser.add_argument("--partial", action="store_true")
    parser.add_argument("--benchmark-dir")
    parser.add_argument("expected")
    parser.add_argument("junit", nargs="+")
    opts = parser.parse_args()
    name = opts.name
    expected = load_expected(opts.expected)

    passed, failed, skipped = [], [], []
    for path in opts.junit:
        try:
            p, f, s = read_report(path)
        except (OSError, ET.ParseError) as e:
            print(f"{name}: cannot read the junit report {path}: {e}", file=sys.stderr)
            return 2
        if len(opts.junit) > 1:
            print(f"{name}: {os.path.basename(path)}: {len(p)} passed, {len(f)} failed, {len(s)} skipped")
        passed += p
        failed += f
        skipped += s

    def matches(spec):
        return [e for e in expected if e[3].search(spec)]

    unexpected = [(n, m) for n, m in failed if not matches(n)]
    expected_failed = [(n, m) for n, m in failed if matches(n)]
    used = {e[0] for n, _ in expected_failed for e in matches(n)}

    print(f"{name}: {len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped")
    print(f"{name}: {len(expected_failed)} expected failures, {len(unexpected)} unexpected")
    if expected_failed:
        print(f"\nExpected failures ({len(expected_failed)}):")
        for spec, _ in expected_failed:
            print(f"  - {spec}  # {matches(spec)[0][2]}")
    if unexpected:
        print(f"\nUNEXPECTED FAILURES ({len(unexpected)}):")
        for spec, msg in unexpected:
            print(f"  - {spec}")
            if msg:
                print(indent(msg))

    now_passing, unmatched = [], []
    for lineno, pattern, reason, regex in expected:
        if lineno in used:
            continue
        hits = [n for n in passed if regex.search(n)]
        if hits:
            now_passing.append((lineno, pattern, hits))
        else:
            unmatched.append((lineno, pattern, [n for n in skipped if regex.search(n)]))
    if now_passing:
        print(f"\nExpected failures that now PASS ({len(now_passing)}); remove them from {opts.expected}:")
        for lineno, pattern, hits in now_passing:
            print(f"  - line {lineno}: {pattern}  ({len(hits)} passing spec(s))")
    if unmatched and not opts.partial:
        print(f"\nExpected-failure lines that match no failed spec ({len(unmatched)}; skipped or not run):")
        for lineno, pattern, hits in unmatched:
            note = f"  ({len(hits)} skipped spec(s))" if hits else ""
            print(f"  - line {lineno}: {pattern}{note}")

    if opts.benchmark_dir:
        print_benchmarks(opts.benchmark_dir)

    if not passed and not failed:
        print(f"{name}: the reports hold no spec results", file=sys.stderr)
        return 2
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
