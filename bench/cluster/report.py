#!/usr/bin/env python3
"""Turns bench/run-cluster's raw.jsonl (rows of `qccl-bench allreduce --json`, tagged with the link)
into plots, a plain-text summary, and the "Emulated cluster" section of bench/RESULTS.md.

  report.py --raw OUT/raw.jsonl --plots bench/plots --summary OUT/summary.txt
            [--results bench/RESULTS.md] [--notes bench/cluster/notes.md]

Only two blocks of RESULTS.md are rewritten: the lines between the cluster-summary markers in
"Summary", and the lines between the cluster-report markers inside the "Emulated cluster" section
(the last default-matrix run). Everything else, the hand-written subsections of that section
included, is left as it is. Where the report markers are missing, the block is inserted right
under the section's heading (and the section is appended where it is missing).
"""
import argparse
import json
import os
import re
import sys

MiB = 1 << 20
SECTION = "## Emulated cluster (`bench/run-cluster`)"
SUM_BEGIN = "<!-- cluster-summary:begin -->"
SUM_END = "<!-- cluster-summary:end -->"
REPORT_BEGIN = "<!-- cluster-report:begin (written by bench/cluster/report.py; edit bench/cluster/notes.md instead) -->"
REPORT_END = "<!-- cluster-report:end -->"
CODEC_ORDER = ["none", "fp16", "bf16", "onebit", "signscale", "maxmin2", "maxmin4", "maxmin8", "dyn8"]


def label(row):
    if row["codec"] == "maxmin":
        return "maxmin%d" % row["bits"]
    return "none" if row["codec"] == "fp32" else row["codec"]


def link_name(link):
    return {"none": "unshaped", "local": "local (shared memory)"}.get(link, link.replace("gbit", " Gbit/s"))


def size_name(size):
    return "%d MiB" % (size // MiB) if size >= MiB else "%d KiB" % (size // 1024)


def load(path):
    rows, bad = [], 0
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
                if "model" in r:
                    continue  # the alpha-beta fit qccl-bench prints after its rows
                if r.get("collective", "allreduce") == "allreduce" and r["time_s"] > 0:
                    r["label"] = label(r)
                    rows.append(r)
            except (ValueError, KeyError, TypeError):
                bad += 1
    if bad:
        print("report: skipped %d malformed rows" % bad, file=sys.stderr)
    return rows


def index(rows):
    """(link, nranks, label, size) -> row; a later row of the same key wins (a rerun)."""
    return {(r["link"], r["nranks"], r["label"], r["size"]): r for r in rows}


def ordered(values, order=None):
    values = set(values)
    if order:
        return [v for v in order if v in values] + sorted(values - set(order))
    return sorted(values)


def link_order(links):
    def key(l):
        if l == "local":
            return (2, 0)
        if l == "none":
            return (1, 0)
        m = re.match(r"([0-9.]+)([kmg])bit", l)
        return (0, float(m.group(1)) * {"k": 1e-6, "m": 1e-3, "g": 1}[m.group(2)]) if m else (3, 0)

    return sorted(set(links), key=key)


def x_best(row):
    """Speedup over the best uncompressed path of the same run (None for rows from before it was timed)."""
    return row.get("speedup_vs_best")


def best_name(row):
    return row.get("best_uncompressed", "MPI_Allreduce")


# ---------------------------------------------------------------------------------------------------
# Targets (issue 11): against the best uncompressed path of the same run
# ---------------------------------------------------------------------------------------------------
def targets(ix, rows):
    out = []
    size64 = 64 * MiB
    for codec, want in (("onebit", 15.0), ("maxmin4", 5.0), ("fp16", 1.8)):
        r = ix.get(("1gbit", 4, codec, size64))
        name = "4 hosts, 1 Gbit/s, 64 MiB: %s >= %gx the best uncompressed path" % (codec, want)
        if r is None or x_best(r) is None:
            out.append((name, None, "not measured in this run"))
        else:
            got = x_best(r)
            out.append((name, got >= want, "%.2fx (qccl %.1f ms, best %s %.1f ms; %.2fx MPI_Allreduce)" % (
                got, r["time_s"] * 1e3, best_name(r), r["best_uncompressed_time_s"] * 1e3, r["speedup_vs_mpi"])))
    for codec in ("onebit", "maxmin4"):
        eff = [(r["wire_bytes"] * 8 / r["time_s"] / r["link_bps"], r) for r in rows
               if r["label"] == codec and r["link_bps"] > 0 and r["size"] >= 16 * MiB]
        name = "wire busbw of %s >= 70%% of the link from 16 MiB" % codec
        if not eff:
            out.append((name, None, "not measured in this run"))
            continue
        worst, wr = min(eff, key=lambda e: e[0])
        four = [e for e, r in eff if r["link"] == "1gbit" and r["nranks"] == 4]
        detail = "worst %.0f%% (%s, %d hosts, %s)" % (100 * worst, link_name(wr["link"]), wr["nranks"],
                                                     size_name(wr["size"]))
        if four:
            detail += "; 4 hosts at 1 Gbit/s: %.0f%%..%.0f%%" % (100 * min(four), 100 * max(four))
        out.append((name, worst >= 0.7, detail))
    local = [r for r in rows if r["link"] == "local" and r["nranks"] == 4 and r["algo"] == "auto"
             and r["label"] == "none" and x_best(r) is not None]
    name = "unshaped, 4 local ranks, --algo auto with nothing to compress >= 0.97x the best uncompressed path"
    if not local:
        out.append((name, None, "not measured in this run"))
    else:
        worst = min(local, key=x_best)
        out.append((name, x_best(worst) >= 0.97, "worst %.2fx (%s, best %s)" % (
            x_best(worst), size_name(worst["size"]), best_name(worst))))
    return out


def verdict(ok):
    return "not measured" if ok is None else ("met" if ok else "**missed**")


# ---------------------------------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------------------------------
def plots(ix, rows, plot_dir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    os.makedirs(plot_dir, exist_ok=True)
    made = []
    links = [l for l in link_order(r["link"] for r in rows) if l != "local"]
    ranks = ordered(r["nranks"] for r in rows if r["link"] != "local")
    codecs = ordered((r["label"] for r in rows), CODEC_ORDER)
    for link in links:
        fig, axes = plt.subplots(1, len(ranks), figsize=(5 * len(ranks), 4.2), squeeze=False)
        for ax, n in zip(axes[0], ranks):
            base = {}
            for c in codecs:
                pts = sorted((s, r) for (l, k, cc, s), r in ix.items() if l == link and k == n and cc == c)
                if not pts:
                    continue
                ax.plot([s / MiB for s, _ in pts], [r["time_s"] * 1e3 for _, r in pts], marker="o", ms=3, label=c)
                for s, r in pts:
                    base.setdefault(s, []).append(r.get("best_uncompressed_time_s", r["mpi_time_s"]))
            if base:
                xs = sorted(base)
                ax.plot([s / MiB for s in xs], [1e3 * sorted(base[s])[len(base[s]) // 2] for s in xs], "k--",
                        lw=2, label="best uncompressed")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("tensor size (MiB of fp32)")
            ax.set_ylabel("allreduce time (ms)")
            ax.set_title("%d hosts, %s" % (n, link_name(link)))
            ax.grid(True, which="both", alpha=0.3)
        axes[0][-1].legend(fontsize=7, loc="upper left")
        fig.tight_layout()
        path = os.path.join(plot_dir, "cluster_time_%s.png" % link.replace(".", "_"))
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made.append(path)

    # Speedup against link rate at the largest size every link measured (64 MiB when present).
    sizes = ordered(r["size"] for r in rows if r["link"] != "local")
    if not sizes:
        return made
    size = 64 * MiB if 64 * MiB in sizes else sizes[-1]
    fig, axes = plt.subplots(1, len(ranks), figsize=(5 * len(ranks), 4.2), squeeze=False)
    xpos = {l: i for i, l in enumerate(links)}
    for ax, n in zip(axes[0], ranks):
        for c in codecs:
            pts = [(xpos[l], x_best(ix[(l, n, c, size)])) for l in links
                   if (l, n, c, size) in ix and x_best(ix[(l, n, c, size)]) is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=c)
        ax.axhline(1.0, color="k", ls="--", lw=1)
        ax.set_xticks(range(len(links)))
        ax.set_xticklabels([link_name(l) for l in links])
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.set_xlabel("link rate")
        ax.set_ylabel("speedup over the best uncompressed path")
        ax.set_title("%d hosts, %s" % (n, size_name(size)))
        ax.grid(True, which="both", alpha=0.3)
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    path = os.path.join(plot_dir, "cluster_speedup.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    made.append(path)
    return made


# ---------------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------------
def time_tables(ix, rows):
    lines = []
    links = link_order(r["link"] for r in rows)
    codecs = ordered((r["label"] for r in rows), CODEC_ORDER)
    for link in links:
        for n in ordered(r["nranks"] for r in rows if r["link"] == link):
            cs = [c for c in codecs if any(k[0] == link and k[1] == n and k[2] == c for k in ix)]
            sizes = ordered(k[3] for k in ix if k[0] == link and k[1] == n)
            lines.append("**%s, %d %s** — median ms; in brackets: speedup over the best uncompressed path "
                         "timed in the same run (x_best), then over `MPI_Allreduce`. The baseline columns give "
                         "the median over this table's runs; best names the one that most often won." % (
                link_name(link), n, "local ranks" if link == "local" else "hosts"))
            lines.append("")
            lines.append("| size | MPI_Allreduce | best uncompressed | fp16 ring | " + " | ".join(cs) + " |")
            lines.append("|---:|---:|---|---:|" + "---:|" * len(cs))
            for s in sizes:
                rs = [ix.get((link, n, c, s)) for c in cs]
                got = [r for r in rs if r]
                med = lambda key: sorted(r[key] for r in got)[len(got) // 2]
                names = [best_name(r) for r in got if x_best(r) is not None]
                best = "%.1f %s" % (med("best_uncompressed_time_s") * 1e3, max(set(names), key=names.count)) \
                    if len(names) == len(got) else "-"
                cells = [("%.1f (%.2fx, %.2fx)" % (r["time_s"] * 1e3, x_best(r), r["speedup_vs_mpi"])
                          if x_best(r) is not None else "%.1f (-, %.2fx)" % (r["time_s"] * 1e3, r["speedup_vs_mpi"]))
                         if r else "" for r in rs]
                lines.append("| %s | %.1f | %s | %.1f | %s |" % (size_name(got[0]["size"]), med("mpi_time_s") * 1e3,
                                                                best, med("fp16_time_s") * 1e3, " | ".join(cells)))
            lines.append("")
    return lines


def nominal_bits(codec):
    return {"none": 32, "fp16": 16, "bf16": 16, "onebit": 1, "signscale": 1, "maxmin2": 2, "maxmin4": 4,
            "maxmin8": 8, "dyn8": 8}.get(codec)


def scaling_table(ix, rows):
    """Per-rank wire bytes of sra against 2(n-1)/n of the compressed tensor, across host counts."""
    lines = []
    link = next((l for l in link_order(r["link"] for r in rows) if l != "local"), None)
    if link is None:
        return lines
    sizes = ordered(r["size"] for r in rows if r["link"] == link)
    size = 64 * MiB if 64 * MiB in sizes else sizes[-1]
    codecs = [c for c in ("onebit", "signscale", "maxmin2", "maxmin4", "maxmin8", "dyn8")
              if any(k[0] == link and k[2] == c for k in ix)]
    ranks = ordered(r["nranks"] for r in rows if r["link"] == link)
    lines.append("Per-rank wire bytes of the compressed allreduce at %s (%s), against the compressed "
                 "tensor C = size x bits/32 (nominal, without the per-bucket scales and headers). For "
                 "scatter-reduce + allgather, wire/C should stay near 2(n-1)/n times a constant codec "
                 "overhead, i.e. the last column should not grow with n. `--algo auto` runs sra from 3 "
                 "ranks and allgather at 2, where each rank sends its compressed tensor once: the same "
                 "2(n-1)/n = 1." % (size_name(size), link_name(link)))
    lines.append("")
    lines.append("| codec | hosts | algo | 2(n-1)/n | wire bytes/rank | wire / C | (wire / C) / (2(n-1)/n) |")
    lines.append("|---|---:|---|---:|---:|---:|---:|")
    for c in codecs:
        for n in ranks:
            r = ix.get((link, n, c, size))
            if not r:
                continue
            f = 2 * (n - 1) / n
            comp = size * nominal_bits(c) / 32
            lines.append("| %s | %d | %s | %.3f | %.0f | %.3f | %.3f |" % (
                c, n, r["algo"], f, r["wire_bytes"], r["wire_bytes"] / comp, r["wire_bytes"] / comp / f))
    lines.append("")
    return lines


def wire_table(rows):
    lines = ["Wire busbw: bytes each rank put on its link per second (wire_bytes / time) as a share of the "
             "link rate, from 16 MiB up.", "",
             "| codec | link | hosts | " + " | ".join(size_name(s) for s in ordered(
                 r["size"] for r in rows if r["size"] >= 16 * MiB and r["link_bps"] > 0)) + " |"]
    sizes = ordered(r["size"] for r in rows if r["size"] >= 16 * MiB and r["link_bps"] > 0)
    lines.append("|---|---|---:|" + "---:|" * len(sizes))
    for c in ("onebit", "maxmin4"):
        for link in link_order(r["link"] for r in rows if r["link_bps"] > 0):
            for n in ordered(r["nranks"] for r in rows if r["link"] == link):
                by = {r["size"]: r for r in rows if r["label"] == c and r["link"] == link and r["nranks"] == n}
                if not by:
                    continue
                cells = ["%.0f%%" % (100 * by[s]["wire_bytes"] * 8 / by[s]["time_s"] / by[s]["link_bps"])
                         if s in by else "" for s in sizes]
                lines.append("| %s | %s | %d | %s |" % (c, link_name(link), n, " | ".join(cells)))
    lines.append("")
    return lines


def quality_lines(rows):
    wrong = [r for r in rows if r.get("wrong")]
    checked = [r for r in rows if r.get("checked")]
    if not checked:
        return ["Results were not checked in this run (qccl-bench -c 0); correctness is covered by the tests."]
    return ["%d of %d rows checked, %d with wrong elements." % (len(checked), len(rows), len(wrong))]


def render(ix, rows, meta, notes, made, results_dir, tg):
    """The generated block: the run's description, targets, notes, tables and plots (no section heading)."""
    rel = lambda p: os.path.relpath(p, results_dir)
    L = ["### The last default-matrix run (`bench/run-cluster`)", ""]
    L += ["Each emulated host is a network namespace; links are veth pairs into one bridge, shaped with "
          "`tc tbf` on both ends (`bench/cluster/up`). Ranks run one per host under mpirun over TCP only, "
          "shared memory off (`bench/cluster/launch`). Every row times qccl and the uncompressed paths "
          "(`MPI_Allreduce`, `MPI_Iallreduce`, qccl's fp32 ring, gloo's allreduce, ring-chunked and "
          "halving-doubling over TCP) plus qccl's fp16 ring in the same `qccl-bench allreduce --json -c 1` run, "
          "on the same buffers; x_best is the speedup over the fastest uncompressed one.", ""]
    L += ["```"] + meta + ["```", ""]
    L += ["#### Targets", "", "| target | result | measured |", "|---|---|---|"]
    L += ["| %s | %s | %s |" % (n, verdict(ok), d) for n, ok, d in tg]
    L.append("")
    if notes:
        L += notes + [""]
    L += ["#### Time per allreduce", ""] + time_tables(ix, rows)
    L += ["#### Wire efficiency", ""] + wire_table(rows)
    L += ["#### Scaling with the number of hosts", ""] + scaling_table(ix, rows)
    L += ["#### Plots", ""] + ["![%s](%s)" % (os.path.basename(p), rel(p)) for p in made] + [""]
    L += quality_lines(rows) + [""]
    return L


def summary_lines(tg):
    return ["- Emulated cluster: %s — %s: %s" % (n, verdict(ok).strip("*"), d) for n, ok, d in tg]


def replace_block(text, begin, end, block):
    """text with the lines from begin to end (markers included) replaced by block; None if the
    markers are missing or out of order."""
    a = text.find(begin)
    b = text.find(end, a + len(begin)) if a >= 0 else -1
    if a < 0 or b < 0:
        return None
    return text[:a] + block + text[b + len(end):]


def write_results(path, section_lines, summary):
    """Writes the generated block and the summary lines into RESULTS.md at path; nothing outside
    their markers changes."""
    text = open(path).read() if os.path.exists(path) else "# qccl benchmark results\n\n## Summary\n\n"
    block = REPORT_BEGIN + "\n\n" + "\n".join(section_lines).rstrip("\n") + "\n\n" + REPORT_END
    new = replace_block(text, REPORT_BEGIN, REPORT_END, block)
    if new is None:
        start = text.find(SECTION)
        if start < 0:
            new = text.rstrip("\n") + "\n\n" + SECTION + "\n\n" + block + "\n"
        else:
            head = text.find("\n", start)
            head = len(text) if head < 0 else head + 1
            new = text[:head] + "\n" + block + "\n" + text[head:]
    text = new
    sblock = SUM_BEGIN + "\n" + "\n".join(summary) + "\n" + SUM_END
    new = replace_block(text, SUM_BEGIN, SUM_END, sblock)
    if new is None and "## Summary" in text:
        a = text.index("## Summary")
        end = text.find("\n## ", a + 1)
        end = len(text) if end < 0 else end
        new = text[:end].rstrip("\n") + "\n\n" + sblock + "\n" + text[end:]
    open(path, "w").write(text if new is None else new)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--raw", required=True)
    ap.add_argument("--plots", required=True)
    ap.add_argument("--summary", required=True)
    ap.add_argument("--results")
    ap.add_argument("--notes")
    a = ap.parse_args()
    if not os.path.exists(a.raw):
        sys.exit("report: no such file %s" % a.raw)
    rows = load(a.raw)
    if not rows:
        sys.exit("report: no rows in %s" % a.raw)
    ix = index(rows)
    rows = list(ix.values())
    tg = targets(ix, rows)
    made = plots(ix, rows, a.plots)
    meta_path = os.path.join(os.path.dirname(a.raw), "meta.txt")
    meta = open(meta_path).read().strip().splitlines() if os.path.exists(meta_path) else []
    notes = open(a.notes).read().strip().splitlines() if a.notes and os.path.exists(a.notes) else []
    with open(a.summary, "w") as f:
        f.write("qccl on the emulated cluster (%s)\n" % (meta[0] if meta else "undated"))
        for n, ok, d in tg:
            f.write("  [%s] %s: %s\n" % (verdict(ok).strip("*"), n, d))
        f.write("  plots: %s\n" % ", ".join(made))
    if a.results:
        write_results(a.results, render(ix, rows, meta, notes, made, os.path.dirname(os.path.abspath(a.results)), tg),
                      summary_lines(tg))
        print("report: wrote %s" % a.results)


if __name__ == "__main__":
    main()
