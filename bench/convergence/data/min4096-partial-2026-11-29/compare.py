#!/usr/bin/env python3
"""min_compress_numel=4096 (this folder) against the hook's default (1024) on the same seeds: the
default's rows are ../econtrol-hook-2026-11-28/sra-g0.5 (the same configuration; its fp32 losses
must match these bit for bit, which this checks). Per seed and variant, loss / fp32 under each, and
the means. usage: compare.py (from anywhere)"""
import glob, json, os, statistics as st

here = os.path.dirname(os.path.abspath(__file__))
base = os.path.join(here, "..", "econtrol-hook-2026-11-28", "sra-g0.5")
pairs = {}
for f in sorted(glob.glob(os.path.join(here, "*-s*.json"))):
    a = {r["variant"]: r for r in json.load(open(f))["results"]}
    b = {r["variant"]: r for r in json.load(open(os.path.join(base, os.path.basename(f))))["results"]}
    assert a["fp32"]["test_loss"] == b["fp32"]["test_loss"], f"{f}: fp32 differs from the default's run"
    for v in ("onebit+m", "signscale+m"):
        pairs.setdefault(v, []).append((a[v]["test_loss"] / a["fp32"]["test_loss"], b[v]["test_loss"] / b["fp32"]["test_loss"]))
for v, p in pairs.items():
    lower = sum(x < y for x, y in p)
    print(f"{v}: {len(p)} seeds, loss / fp32 mean {st.mean(x for x, _ in p):.4f} with 4096 against "
          f"{st.mean(y for _, y in p):.4f} with 1024; lower on {lower} of {len(p)}")
