#!/usr/bin/env python3
"""How many real-world JSON schemas the schema compiler takes, and how fast.

    make build/test/test_grammar
    python3 tools/schema_coverage.py DIR [DIR...]

Each DIR holds schemas, one JSON file each (JSONSchemaBench's data/<set>/
directories, say: github.com/guidance-ai/jsonschemabench). Per directory:
the share that compile as the whole language (grammar.h's
gr_json_schema_exact, as tests/test_schema.py checks it) and as what
generation writes (gr_json_schema: response_format, tool arguments; it
may write a valid subset, e.g. no keys besides the listed ones unless
additionalProperties admits them), the compile time's median, 99th
percentile and maximum (schema to a parsed grammar, the whole language),
and the most common refusals of the whole language with the keyword they
name. A file that is not a JSON object is
counted apart. Standard library only; the driver is tests/test_grammar.c's
--schema mode (DRIVER=path to use another build).
"""
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRIVER = os.environ.get("DRIVER", os.path.join(ROOT, "build", "test", "test_grammar"))


def reason(line):
    """A refusal with its particulars (names, numbers, positions) cut out."""
    r = line[len("refused: "):] if line.startswith("refused: ") else line
    r = re.sub(r"\(at character \d+\)", "", r)
    r = re.sub(r'(argument|property|rule) "[^"]{0,100}"', r'\1 "…"', r)
    r = re.sub(r"\d+", "N", r)
    return r.strip()


def run(schemas, mode="--schema"):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
        json.dump([{"schema": s, "texts": []} for s in schemas], f, ensure_ascii=False)
        path = f.name
    try:
        r = subprocess.run([DRIVER, mode, path], capture_output=True, text=True, timeout=3600)
    finally:
        os.unlink(path)
    if r.returncode:
        sys.exit("driver failed: " + r.stderr[-2000:])
    return r.stdout.splitlines()


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    if not os.path.exists(DRIVER):
        sys.exit("%s: not built (make build/test/test_grammar)" % DRIVER)
    total = [0, 0, 0]
    print("%-18s %7s %7s %8s %11s %9s %9s %9s" % ("set", "schemas", "compile", "share", "generation", "p50 ms", "p99 ms", "max ms"))
    reasons_all = collections.Counter()
    for d in sys.argv[1:]:
        schemas, bad = [], 0
        for name in sorted(os.listdir(d)):
            try:
                with open(os.path.join(d, name), encoding="utf-8") as f:
                    s = json.load(f)
            except (OSError, ValueError):
                bad += 1
                continue
            if isinstance(s, dict) or isinstance(s, bool):
                schemas.append(s)
            else:
                bad += 1
        out = run(schemas)
        gen = sum(1 for l in run(schemas, "--schema-gen") if l.startswith("ok "))
        ok = [float(l.split()[1]) * 1e3 for l in out if l.startswith("ok ")]
        reasons = collections.Counter(reason(l) for l in out if l.startswith("refused"))
        reasons_all.update(reasons)
        ok.sort()
        n = len(schemas)
        total[0] += n
        total[1] += len(ok)
        total[2] += gen
        pct = lambda q: ok[min(len(ok) - 1, int(q * len(ok)))] if ok else 0.0
        print("%-18s %7d %7d %7.1f%% %10.1f%% %9.2f %9.2f %9.2f%s" % (os.path.basename(os.path.normpath(d)), n, len(ok), 100.0 * len(ok) / max(n, 1),
                                                                 100.0 * gen / max(n, 1), pct(0.5), pct(0.99), ok[-1] if ok else 0.0,
                                                                 "  (%d files not a schema)" % bad if bad else ""))
    print("%-18s %7d %7d %7.1f%% %10.1f%%" % ("all", total[0], total[1], 100.0 * total[1] / max(total[0], 1), 100.0 * total[2] / max(total[0], 1)))
    print("\nmost common refusals:")
    for r, k in reasons_all.most_common(25):
        print("%6d  %s" % (k, r))


if __name__ == "__main__":
    main()
