#!/usr/bin/env python3
"""A/B experiments on colibri's environment knobs (standard library only).

  tools/ab.py --model DIR --prompt-file F -a 'PIPE=1' -b 'PIPE=0' -n 5
  tools/ab.py --model DIR --prompt-file F --bin-a ./colibri --bin-b /old/colibri

Runs A and B interleaved (A B A B ...) n times each with the same prompt,
seed and settings, parses colibri's end-of-run line, and reports for each
side the median and min-max of decode tok/s, prefill tok/s and time to
first token, the median of the per-pair ratios A/B, expert hit rates and
disk MB per token. The generated token ids of every run must be identical
(knobs that change placement never change tokens); if A and B differ, no
speed comparison is printed unless one side sets a knob documented as
changing the model (MODEL_KNOBS), and the exit status is 1.

Common settings: --env 'K=V ...' (applied to both sides). Defaults added
unless given: SEED=1 (so sampling is repeatable) and USAGE_SAVE=0 (so runs
do not change the usage history the next run pins from).
"""
import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys

# Knobs that change what is computed (precision or routing); A/B runs that
# differ in them may produce different tokens.
MODEL_KNOBS = {"EXPERT_BITS", "DENSE_BITS", "IDOT", "TEMP", "TOP_K", "TOP_P", "MIN_P", "SEED", "THINK", "SYSTEM",
               "CHAT_TEMPLATE", "PROMPT", "NGEN"}

END_RE = re.compile(
    r"colibri: prompt (\d+) tok, ([\d.]+) tok/s \| generated (\d+) tok, ([\d.]+) tok/s \| TTFT ([\d.]+) s \| "
    r"experts: hit ([\d.]+)% \(pin ([\d.]+)% \+ LRU ([\d.]+)%(?: \+ GPU [\d.]+%)?\), miss ([\d.]+)% \| ([\d.]+) MB/tok from disk")


def parse_env(spec):
    """'K=V K2=V2' -> dict; refuses anything that is not K=V."""
    out = {}
    for item in shlex.split(spec or ""):
        if "=" not in item or not item.split("=", 1)[0]:
            raise SystemExit("ab.py: %r is not NAME=VALUE" % item)
        k, v = item.split("=", 1)
        out[k] = v
    return out


def run_once(binary, model, env, timeout):
    """One colibri run: (stats dict, token ids, stderr) or raises SystemExit on failure."""
    full = dict(os.environ)
    full.update(env)
    p = subprocess.run([binary, model], env=full, capture_output=True, timeout=timeout)
    err = p.stderr.decode("utf-8", "replace")
    if p.returncode != 0:
        raise SystemExit("ab.py: colibri exited %d with %s\n%s" % (p.returncode, " ".join("%s=%s" % kv for kv in sorted(env.items())), err[-2000:]))
    m = END_RE.search(err)
    if not m:
        raise SystemExit("ab.py: no end-of-run line in colibri's stderr:\n" + err[-2000:])
    g = [float(x) for x in m.groups()]
    stats = dict(prompt_tokens=int(g[0]), prefill_tps=g[1], gen_tokens=int(g[2]), decode_tps=g[3], ttft=g[4],
                 hit=g[5], hit_pin=g[6], hit_lru=g[7], miss=g[8], mb_per_tok=g[9])
    ids = None
    for line in err.splitlines():
        if line.startswith("colibri: generated tokens:"):
            ids = line.split(":", 2)[2].split()
    return stats, ids if ids is not None else p.stdout, err


def summarize(values):
    return dict(median=statistics.median(values), min=min(values), max=max(values))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--model", required=True, help="model directory")
    ap.add_argument("--prompt-file", help="file whose text is the PROMPT (default: PROMPT from --env)")
    ap.add_argument("-a", default="", help="settings of side A, 'K=V ...'")
    ap.add_argument("-b", default="", help="settings of side B, 'K=V ...'")
    ap.add_argument("-n", type=int, default=5, help="runs per side (interleaved)")
    ap.add_argument("--env", default="", help="settings for both sides")
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "colibri"))
    ap.add_argument("--bin-a", help="side A's binary (default --bin): compare two builds, e.g. before and after a change")
    ap.add_argument("--bin-b", help="side B's binary (default --bin)")
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()
    if a.n < 1:
        raise SystemExit("ab.py: -n must be at least 1")
    common = {"SEED": "1", "USAGE_SAVE": "0", "TOKENS": "1"}
    common.update(parse_env(a.env))
    if a.prompt_file:
        with open(a.prompt_file, encoding="utf-8") as f:
            common["PROMPT"] = f.read()
    sides = {"A": parse_env(a.a), "B": parse_env(a.b)}
    bins = {"A": a.bin_a or a.bin, "B": a.bin_b or a.bin}
    runs = {"A": [], "B": []}
    tokens = {"A": set(), "B": set()}
    for i in range(a.n):
        for side in ("A", "B"):
            env = dict(common)
            env.update(sides[side])
            stats, ids, _ = run_once(bins[side], a.model, env, a.timeout)
            runs[side].append(stats)
            tokens[side].add(tuple(ids) if isinstance(ids, list) else ids)
            print("run %d %s: decode %.3f tok/s, prefill %.1f tok/s, TTFT %.3f s, hit %.1f%%" %
                  (i + 1, side, stats["decode_tps"], stats["prefill_tps"], stats["ttft"], stats["hit"]), file=sys.stderr)
    same_within = len(tokens["A"]) == 1 and len(tokens["B"]) == 1
    same = same_within and tokens["A"] == tokens["B"]
    model_changing = sorted({k for s in sides.values() for k in s if k in MODEL_KNOBS})
    report = {"model": a.model, "A": sides["A"], "B": sides["B"], "bin_A": bins["A"], "bin_B": bins["B"],
              "common": {k: v for k, v in common.items() if k != "PROMPT"},
              "n": a.n, "tokens_identical": same, "runs": runs}
    for side in ("A", "B"):
        report[side + "_summary"] = {k: summarize([r[k] for r in runs[side]]) for k in ("decode_tps", "prefill_tps", "ttft", "hit", "mb_per_tok")}
    pairs = [ra["decode_tps"] / rb["decode_tps"] for ra, rb in zip(runs["A"], runs["B"]) if rb["decode_tps"] > 0]
    report["decode_ratio_A_over_B"] = summarize(pairs) if pairs else None
    print("A: %s%s" % (a.a or "(defaults)", " with " + bins["A"] if bins["A"] != bins["B"] else ""))
    print("B: %s%s" % (a.b or "(defaults)", " with " + bins["B"] if bins["A"] != bins["B"] else ""))
    if not same_within:
        print("tokens differ between runs of the same side: the experiment is not repeatable (check SEED and the knobs)")
    elif not same and not model_changing:
        print("tokens differ between A and B although no knob that changes the model differs: no speed comparison (this is a bug)")
    if same or model_changing:
        if not same:
            print("tokens differ between A and B (expected: %s changes the model)" % ", ".join(model_changing))
        print("%-14s %28s %28s" % ("", "A median [min-max]", "B median [min-max]"))
        for k, label in (("decode_tps", "decode tok/s"), ("prefill_tps", "prefill tok/s"), ("ttft", "TTFT s"),
                         ("hit", "expert hit %"), ("mb_per_tok", "disk MB/tok")):
            sa, sb = report["A_summary"][k], report["B_summary"][k]
            print("%-14s %10.3f [%7.3f-%7.3f] %10.3f [%7.3f-%7.3f]" % (label, sa["median"], sa["min"], sa["max"], sb["median"], sb["min"], sb["max"]))
        if pairs:
            r = report["decode_ratio_A_over_B"]
            print("decode A/B per pair: median %.3f [%.3f-%.3f] over %d pairs" % (r["median"], r["min"], r["max"], len(pairs)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=2, sort_keys=True)
    sys.exit(0 if (same or model_changing) and same_within else 1)


if __name__ == "__main__":
    main()
