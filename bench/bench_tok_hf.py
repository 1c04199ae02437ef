#!/usr/bin/env python3
"""Hugging Face tokenizers' encode throughput on the parity corpus (bench_tok.c's twin).

Usage: bench/bench_tok_hf.py [tokenizer.json] [corpus.jsonl] [runs]
Needs the tokenizers package (tools/requirements-oracle.txt). Prints, in MB/s of
input bytes (MB = 1e6), the median of the runs:
  lines         encode(line) per line, one thread (the figure bench_tok.c's "lines" matches)
  text          the lines joined with "\\n", one encode call
  batch         encode_batch(lines): tokenizers' own thread pool, all cores
Each line is the text a Python user would pass: the corpus bytes decoded with
errors="replace". Input bytes are counted as in bench_tok.c (the raw corpus bytes).
"""
import json
import os
import statistics
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", str(os.cpu_count() or 1))

from tokenizers import Tokenizer  # noqa: E402


def timed(fn, min_s=0.2):
    reps = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        dt = time.perf_counter() - t0
        if dt >= min_s:
            return reps
        reps *= 2


def main():
    tp = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/tokenizer/tokenizer.json"
    cp = sys.argv[2] if len(sys.argv) > 2 else "tests/fixtures/tokenizer/corpus.jsonl"
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    tok = Tokenizer.from_file(tp)
    with open(cp, encoding="ascii") as f:
        raw = [bytes.fromhex(json.loads(x)) for x in f]
    lines = [r.decode("utf-8", "replace") for r in raw]
    nbytes = sum(len(r) for r in raw)
    text = "\n".join(lines) + "\n"
    tbytes = nbytes + len(raw)

    def per_line():
        for s in lines:
            tok.encode(s, add_special_tokens=False)

    def whole():
        tok.encode(text, add_special_tokens=False)

    def batch():
        tok.encode_batch(lines, add_special_tokens=False)

    print("bench_tok_hf: %s, %d lines, %d bytes; tokenizers; median of %d runs" % (tp, len(raw), nbytes, runs))
    for name, fn, nb in (("lines", per_line, nbytes), ("text", whole, tbytes), ("batch", batch, nbytes)):
        fn()  # warm the cache as bench_tok.c's calibration pass does
        reps = timed(fn)
        ts = []
        for _ in range(runs):
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            ts.append(time.perf_counter() - t0)
        print("tokenizers %-6s %.2f MB/s" % (name + ":", nb * reps / statistics.median(ts) / 1e6))


if __name__ == "__main__":
    main()
