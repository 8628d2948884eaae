#!/usr/bin/env python3
"""Table and plot of DDP step time against link rate from bench_ddp.py JSON files (bench/ddp-sweep).

    python3 bench/ddp_report.py [--plot out.png] b1_1gbit.json b1_none.json ...

Per batch size it prints a markdown table: one row per link rate, the median step of every variant
(all timed in the same run at that rate), the best uncompressed peer (the faster of gloo fp32 and
torch's fp16 hook), each qccl codec's speedup over it and over PowerSGD, and the codec's ratio to
(floor + its own wire time at line rate), where the floor is the faster of `compute` (no DDP) and
`noop` (DDP with a hook that communicates nothing), both without any communication. Then, per
codec, where compression stops paying: the link rate at which its step meets the best peer's,
interpolated in log-rate between the two measured rates that bracket it, or "pays at every rate
measured".
"""

import argparse
import json
import math
import os
import re
import sys
from collections import defaultdict

PEERS = ("fp32", "fp16")  # the uncompressed peers (fp16 halves the bytes but is DDP's stock hook)
ORDER = ("compute", "noop", "fp32", "fp16", "powersgd")


def rate_bps(link):
    """1gbit -> 1e9; none/unshaped -> None."""
    if link in (None, "none", "unshaped"):
        return None
    m = re.fullmatch(r"([0-9.]+)\s*([kmg]?)(bit)?", link.lower())
    if not m:
        raise SystemExit(f"unrecognised link rate {link!r}")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]


def link_label(link):
    bps = rate_bps(link)
    if bps is None:
        return "unshaped"
    return f"{bps / 1e9:g} Gbit/s"


def load(paths):
    runs = defaultdict(dict)  # batch -> link -> {variant: row}
    meta = {}
    for p in paths:
        with open(p) as f:
            d = json.load(f)
        a = d["args"]
        link = a.get("link") or os.path.basename(p).rsplit("_", 1)[-1].removesuffix(".json")
        runs[a["batch"]][link] = {r["variant"]: r for r in d["results"]}
        meta = {"ranks": d["ranks"], "parameters": d["parameters"], "steps": a["steps"], "warmup": a["warmup"],
                "bucket_view": a.get("bucket_view", False), "momentum": a.get("momentum", 0.0)}
    return runs, meta


def ordered_links(links):
    return sorted(links, key=lambda l: (rate_bps(l) is None, rate_bps(l) or 0))


def variants_of(rows):
    names = set()
    for r in rows.values():
        names.update(r)
    fixed = [v for v in ORDER if v in names]
    return fixed + sorted(n for n in names if n not in ORDER)


def wire_seconds(row, link):
    """The codec's bytes per step at line rate: each rank sends bytes_sent per step over its own link."""
    bps = rate_bps(link)
    if bps is None or "qccl_bytes_sent_per_step" not in row:
        return 0.0
    return 8.0 * row["qccl_bytes_sent_per_step"] / bps


def best_peer(rows):
    cands = [(rows[v]["median_s"], v) for v in PEERS if v in rows]
    return min(cands) if cands else (None, None)


def crossover(points):
    """points: [(bps or None, speedup)] in rate order; the rate where the speedup falls through 1."""
    prev = None
    for bps, sp in points:
        if prev is not None and prev[1] >= 1.0 > sp:
            if bps is None:
                return f"between {prev[0] / 1e9:g} Gbit/s and unshaped"
            # interpolate in log(rate) on log(speedup)
            x0, x1 = math.log(prev[0]), math.log(bps)
            y0, y1 = math.log(prev[1]), math.log(sp)
            x = x0 + (0 - y0) * (x1 - x0) / (y1 - y0)
            return f"≈ {math.exp(x) / 1e9:.2g} Gbit/s (between {prev[0] / 1e9:g} and {bps / 1e9:g})"
        prev = (bps, sp)
    if points and all(sp >= 1.0 for _, sp in points):
        return "pays at every rate measured"
    if points and points[0][1] < 1.0:
        return "does not pay at any rate measured"
    return "-"


def table(batch, rows_by_link):
    links = ordered_links(rows_by_link)
    variants = variants_of(rows_by_link)
    codecs = [v for v in variants if v.startswith("qccl-")]
    out = [f"### batch {batch} per rank", ""]
    head = ["link"] + variants + ["best peer"] + [f"{c[5:]} x_best" for c in codecs]
    has_psgd = any("powersgd" in rows_by_link[l] for l in links)
    if has_psgd:
        head += [f"{c[5:]} x_powersgd" for c in codecs]
    head += [f"{c[5:]} / (floor+wire)" for c in codecs]
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "---|" * len(head))
    cross = {c: [] for c in codecs}
    for link in links:
        rows = rows_by_link[link]
        best, name = best_peer(rows)
        cells = [link_label(link)]
        cells += [f"{1e3 * rows[v]['median_s']:.0f}" if v in rows else "-" for v in variants]
        cells.append(f"{name} {1e3 * best:.0f}" if best else "-")
        for c in codecs:
            if c in rows and best:
                sp = best / rows[c]["median_s"]
                cross[c].append((rate_bps(link), sp))
                cells.append(f"{sp:.2f}x")
            else:
                cells.append("-")
        if has_psgd:
            for c in codecs:
                ok = c in rows and "powersgd" in rows
                cells.append(f"{rows['powersgd']['median_s'] / rows[c]['median_s']:.2f}x" if ok else "-")
        floor = min((rows[v]["median_s"] for v in ("compute", "noop") if v in rows), default=None)
        for c in codecs:
            if c in rows and floor:
                ref = floor + wire_seconds(rows[c], link)
                cells.append(f"{rows[c]['median_s'] / ref:.2f}")
            else:
                cells.append("-")
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    for c in codecs:
        out.append(f"- {c[5:]}: against the best uncompressed peer, {crossover(cross[c])}")
    out.append("")
    return out


def plot(runs, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    batches = sorted(runs)
    fig, axes = plt.subplots(1, len(batches), figsize=(6.5 * len(batches), 4.6), squeeze=False)
    for ax, batch in zip(axes[0], batches):
        rows_by_link = runs[batch]
        links = ordered_links(rows_by_link)
        shaped = [rate_bps(l) for l in links if rate_bps(l) is not None]
        # unshaped sits one octave past the fastest shaped rate, labelled as such
        top = max(shaped) if shaped else 1e9
        xs = {l: (rate_bps(l) or 2.0 * top) / 1e9 for l in links}
        for v in variants_of(rows_by_link):
            pts = [(xs[l], 1e3 * rows_by_link[l][v]["median_s"]) for l in links if v in rows_by_link[l]]
            if not pts:
                continue
            style = {"compute": dict(color="black", linestyle=":"), "noop": dict(color="gray", linestyle=":")}
            ax.plot(*zip(*pts), marker="o", label=v, **style.get(v, {}))
        ax.set_xscale("log")
        ax.set_xticks([xs[l] for l in links])
        ax.set_xticklabels([link_label(l).replace(" Gbit/s", "G") for l in links])
        ax.set_xlabel("link rate per host (Gbit/s)")
        ax.set_ylabel("median DDP step (ms)")
        ax.set_ylim(bottom=0)
        ax.set_title(f"batch {batch} per rank")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+")
    ap.add_argument("--plot", help="write a PNG here")
    args = ap.parse_args()
    runs, meta = load(args.json)
    mom = f"; SGD momentum {meta['momentum']:g}" if meta["momentum"] else ""
    print(f"{meta['ranks']} hosts x 1 rank, {meta['parameters'] / 1e6:.1f}M parameters, median of {meta['steps']} "
          f"steps after {meta['warmup']} warm-up steps; step times in ms"
          f"{'; gradient_as_bucket_view' if meta['bucket_view'] else ''}"
          f"{mom}\n")
    for batch in sorted(runs):
        print("\n".join(table(batch, runs[batch])))
    if args.plot:
        plot(runs, args.plot)


if __name__ == "__main__":
    main()
