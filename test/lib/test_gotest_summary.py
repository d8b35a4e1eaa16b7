#!/usr/bin/env python3
"""Tests of gotest-summary.py; make lint runs them (python3 -B -m unittest discover -s test/lib)."""

import json
import os
import subprocess
import sys
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gotest-summary.py")


def ev(action, test="", output=None, elapsed=None, pkg="p"):
    e = {"Action": action, "Package": pkg}
    if test:
        e["Test"] = test
    if output is not None:
        e["Output"] = output
    if elapsed is not None:
        e["Elapsed"] = elapsed
    return json.dumps(e)


def run(lines):
    p = subprocess.run([sys.executable, SCRIPT, "--slowest", "2"], input="\n".join(lines) + "\n",
                       capture_output=True, text=True, check=False)
    return p.returncode, p.stdout


class GotestSummary(unittest.TestCase):
    def test_pass_lists_the_slowest(self):
        rc, out = run([ev("run", "TestA"), ev("output", "TestA", "quiet line\n"), ev("pass", "TestA", elapsed=3.5),
                       ev("run", "TestB"), ev("pass", "TestB", elapsed=9), ev("run", "TestC"), ev("pass", "TestC", elapsed=1),
                       ev("pass", elapsed=14)])
        self.assertEqual(rc, 0, out)
        self.assertNotIn("quiet line", out)  # a passing test's output is not printed
        self.assertIn("ok  \tp\t14.0s", out)
        self.assertLess(out.index("TestB"), out.index("TestA"))
        self.assertNotIn("TestC", out)  # only the two slowest

    def test_failed_subtest_prints_its_top_level_output(self):
        rc, out = run([ev("run", "TestA"), ev("output", "TestA", "start\n"), ev("run", "TestA/sub"),
                       ev("output", "TestA/sub", "    broken here\n"), ev("fail", "TestA/sub", elapsed=1),
                       ev("fail", "TestA", elapsed=1), ev("fail", elapsed=1)])
        self.assertEqual(rc, 1, out)
        self.assertIn("start\n    broken here", out)
        self.assertIn("FAILED (1): TestA", out)

    def test_unfinished_test_printed_when_the_package_fails(self):
        rc, out = run([ev("run", "TestHang"), ev("output", "TestHang", "about to hang\n"),
                       ev("output", "", "panic: test timed out after 2s\n"), ev("fail", elapsed=2)])
        self.assertEqual(rc, 1, out)
        self.assertIn("about to hang", out)
        self.assertIn("panic: test timed out", out)

    def test_no_result_is_a_failure(self):
        rc, out = run(["go: downloading something"])
        self.assertEqual(rc, 1, out)
        self.assertIn("go: downloading something", out)


if __name__ == "__main__":
    unittest.main()
