#!/usr/bin/env python3
"""Tests of expected-failures.py; make lint runs them (python3 -B -m unittest discover -s test/lib)."""

import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "expected-failures.py")

JUNIT = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites><testsuite name="s">
  <testcase name="[BeforeSuite]" status="passed"></testcase>
  <testcase name="[It] [sig-node] Security Context should support RunAsUserName" status="failed">
    <failure message="boom">[FAILED] runAsUserName failed
{
    big: dump,
}
at x.go:1</failure></testcase>
  <testcase name="[It] [sig-node] Security Context should support RunAsUser" status="passed"></testcase>
  <testcase name="[It] [sig-node] Image Manager public image with digest should be pulled" status="failed">
    <failure message="no digest">[FAILED] no digest</failure></testcase>
  <testcase name="[It] [sig-node] AppArmor should load" status="skipped"></testcase>
  %s
</testsuite></testsuites>
"""


class ExpectedFailures(unittest.TestCase):
    def run_script(self, expected, extra_case="", args=()):
        with tempfile.TemporaryDirectory() as d:
            junit, exp = os.path.join(d, "junit.xml"), os.path.join(d, "expected.txt")
            with open(junit, "w", encoding="utf-8") as f:
                f.write(JUNIT % extra_case)
            with open(exp, "w", encoding="utf-8") as f:
                f.write(expected)
            p = subprocess.run([sys.executable, SCRIPT, *args, exp, junit],
                               capture_output=True, text=True, check=False)
            return p.returncode, p.stdout + p.stderr

    def test_all_failures_expected(self):
        rc, out = self.run_script("# comment\n\npublic image with digest # no registry\n"
                                  "should support RunAsUserName # reason\n")
        self.assertEqual(rc, 0, out)
        self.assertIn("critest: 1 passed, 2 failed, 1 skipped", out)
        self.assertIn("2 expected failures, 0 unexpected", out)

    def test_word_boundary(self):
        # "should support RunAsUser" must not cover "should support RunAsUserName", and the
        # line is reported as now passing since the spec of that name passed.
        rc, out = self.run_script("public image with digest # x\nshould support RunAsUser # y\n")
        self.assertEqual(rc, 1, out)
        self.assertIn("UNEXPECTED FAILURES (1)", out)
        self.assertIn("runAsUserName failed", out)
        self.assertNotIn("big: dump", out)  # gomega's value dumps are dropped
        self.assertIn("now PASS (1)", out)

    def test_failed_suite_node_counts(self):
        rc, out = self.run_script("public image with digest # x\nRunAsUserName # y\n",
                                  '<testcase name="[AfterSuite]" status="failed"><failure>[FAILED] cleanup</failure></testcase>')
        self.assertEqual(rc, 1, out)
        self.assertIn("[AfterSuite]", out)

    def test_unmatched_line_listed_unless_partial(self):
        exp = "public image with digest # x\nRunAsUserName # y\nAppArmor should load # z\n"
        rc, out = self.run_script(exp)
        self.assertEqual(rc, 0, out)
        self.assertIn("match no failed spec (1", out)
        rc, out = self.run_script(exp, args=("--partial", "--name", "e2e-node"))
        self.assertEqual(rc, 0, out)
        self.assertNotIn("match no failed spec", out)
        self.assertIn("e2e-node: 1 passed", out)

    def test_missing_report(self):
        p = subprocess.run([sys.executable, SCRIPT, "/dev/null", "/nonexistent.xml"],
                           capture_output=True, text=True, check=False)
        self.assertEqual(p.returncode, 2)


if __name__ == "__main__":
    unittest.main()
