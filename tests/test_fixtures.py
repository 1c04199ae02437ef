#!/usr/bin/env python3
"""The committed fixtures are exactly what tools/make_oracle.py wrote: their
SHA-256 sums match tests/fixtures/SHA256SUMS (regenerate both with the tool,
never edit one by hand). Dot files (a run's .coli_usage) are not fixtures.
Stdlib only."""
import hashlib
import os
import sys

ROOT = "tests/fixtures"


def main():
    bad, n = [], 0
    with open(os.path.join(ROOT, "SHA256SUMS")) as f:
        for line in f:
            want, name = line.split()
            with open(os.path.join(ROOT, name), "rb") as g:
                got = hashlib.sha256(g.read()).hexdigest()
            n += 1
            if got != want:
                bad.append(name)
    listed = {l.split()[1] for l in open(os.path.join(ROOT, "SHA256SUMS"))}
    for d in sorted(os.listdir(ROOT)):
        p = os.path.join(ROOT, d)
        if os.path.isdir(p) and os.path.exists(os.path.join(p, "ref.json")):
            for fn in os.listdir(p):
                if not fn.startswith(".") and "%s/%s" % (d, fn) not in listed:
                    bad.append("%s/%s (not recorded)" % (d, fn))
    if bad:
        sys.exit("fixtures differ from tools/make_oracle.py output: " + ", ".join(bad))
    print("test_fixtures: %d files match their recorded hashes" % n)
    print("test_fixtures: %d checks passed, 0 skipped" % n)


if __name__ == "__main__":
    main()  # (tests/run.py passes -v; there is nothing more to say)
