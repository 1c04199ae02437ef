#!/usr/bin/env python3
"""Summarizes a routing trace (ROUTE_TRACE, format in route_trace.h): how
concentrated each MoE layer's expert use is, how often a row reuses the
previous rows' experts, what an LRU cache of C experts per layer would hit,
and how many of a row's experts the router lookahead predicted (recall) and
how many of its predictions were not used (waste), for the first k of its
predictions. Standard library only.

Usage: tools/route_stats.py TRACE [--json]
"""
import json
import struct
import sys
from collections import OrderedDict

NONE = 0xFFFF


def load(path):
    with open(path, "rb") as f:
        b = f.read()
    if len(b) < 32 or b[:8] != b"COLIRTR1":
        raise SystemExit("%s: not a routing trace (no COLIRTR1 header)" % path)
    layers, topk, pred_k, experts, rows = struct.unpack_from("<IIIIQ", b, 8)
    stride = layers * (topk + pred_k)
    if len(b) != 32 + rows * stride * 2:
        raise SystemExit("%s: its size is not what the header says" % path)
    ids = struct.unpack_from("<%dH" % (rows * stride), b, 32)
    tr = dict(layers=layers, topk=topk, pred_k=pred_k, experts=experts, rows=rows, chosen=[], pred=[])
    for j in range(layers):
        ch, pr = [], []
        for r in range(rows):
            o = r * stride + j * (topk + pred_k)
            ch.append(ids[o:o + topk])
            pr.append([x for x in ids[o + topk:o + topk + pred_k] if x != NONE])
        tr["chosen"].append(ch)
        tr["pred"].append(pr)
    return tr


def concentration(ch, experts):
    cnt = [0] * experts
    for row in ch:
        for e in row:
            cnt[e] += 1
    s = sorted(cnt, reverse=True)
    tot = sum(s)
    acc, cover = 0, {}
    for i, c in enumerate(s):
        acc += c
        for q in (0.5, 0.9):
            if q not in cover and acc >= q * tot:
                cover[q] = i + 1
    return dict(used=sum(1 for c in cnt if c), cover50=cover.get(0.5), cover90=cover.get(0.9),
                top_eighth_share=sum(s[:max(1, experts // 8)]) / tot)


def reuse(ch, back):
    """Share of a row's experts chosen by one of the `back` rows before it."""
    hit = n = 0
    for r in range(back, len(ch)):
        seen = set()
        for b in range(1, back + 1):
            seen.update(ch[r - b])
        hit += sum(1 for e in ch[r] if e in seen)
        n += len(ch[r])
    return hit / n if n else None


def lru_hits(ch, slots):
    cache, hit, n = OrderedDict(), 0, 0
    for row in ch:
        for e in row:
            n += 1
            if e in cache:
                hit += 1
                cache.move_to_end(e)
            else:
                cache[e] = 1
                if len(cache) > slots:
                    cache.popitem(last=False)
    return hit / n


def lookahead(ch, pr, k, cached=None):
    """Recall: the share of chosen experts among the first k predictions;
    waste: the share of those predictions not chosen. With cached (LRU
    slots), only predictions and choices outside an LRU of that many slots
    count: what a prefetch would read."""
    rec = used = pred_n = want = 0
    cache = OrderedDict()
    for row, p in zip(ch, pr):
        p = p[:k]
        if not p:
            continue
        if cached:
            miss = [e for e in row if e not in cache]
            pm = [e for e in p if e not in cache]
        else:
            miss, pm = list(row), list(p)
        ps = set(pm)
        rec += sum(1 for e in miss if e in ps)
        want += len(miss)
        used += sum(1 for e in pm if e in set(row))
        pred_n += len(pm)
        if cached:
            for e in row:
                cache.pop(e, None)
                cache[e] = 1
                if len(cache) > cached:
                    cache.popitem(last=False)
    return dict(recall=rec / want if want else None, waste=1 - used / pred_n if pred_n else None, predictions_per_row=pred_n / len(ch))


def summarize(tr):
    out = dict({k: tr[k] for k in ("layers", "topk", "pred_k", "experts", "rows")}, per_layer=[])
    K = tr["topk"]
    for j in range(tr["layers"]):
        ch, pr = tr["chosen"][j], tr["pred"][j]
        row = dict(layer=j, **concentration(ch, tr["experts"]))
        row["reuse_prev1"] = reuse(ch, 1)
        row["reuse_prev4"] = reuse(ch, 4)
        row["lru_hit"] = {str(c): lru_hits(ch, c) for c in (K, 2 * K, 4 * K) if c < tr["experts"]}
        if tr["pred_k"]:
            row["lookahead"] = {str(k): lookahead(ch, pr, k) for k in sorted({K, tr["pred_k"]}) if k <= tr["pred_k"]}
            row["lookahead_misses_lru2k"] = {str(k): lookahead(ch, pr, k, 2 * K) for k in sorted({K, tr["pred_k"]}) if k <= tr["pred_k"]}
        out["per_layer"].append(row)
    return out


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    s = summarize(load(sys.argv[1]))
    if "--json" in sys.argv[2:]:
        print(json.dumps(s, indent=1))
        return
    print("%d rows, %d MoE layers, top-%d of %d experts, %d predictions per row" % (s["rows"], s["layers"], s["topk"], s["experts"], s["pred_k"]))
    for r in s["per_layer"]:
        f = lambda v: "-" if v is None else "%.1f%%" % (100 * v)
        print("layer %d: %d experts used, %s and %s cover half and 90%% of choices; a row reuses %s of the previous row's experts, %s of the last 4's; "
              "LRU hit %s" % (r["layer"], r["used"], r["cover50"], r["cover90"], f(r["reuse_prev1"]), f(r["reuse_prev4"]),
                              ", ".join("%s slots %s" % (c, f(v)) for c, v in r["lru_hit"].items())))
        for k, v in r.get("lookahead", {}).items():
            m = r["lookahead_misses_lru2k"][k]
            print("  lookahead top-%s: recall %s, waste %s; on an LRU of %d slots: recall of misses %s, waste of the reads %s"
                  % (k, f(v["recall"]), f(v["waste"]), 2 * s["topk"], f(m["recall"]), f(m["waste"])))


if __name__ == "__main__":
    main()
