"""bench/cluster/report.py: targets and tables quote the best uncompressed path of the same run
(x_best), and rows from before it was timed still load (their x_best shows as "-")."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "cluster"))
import report as R  # noqa: E402

MiB = 1 << 20


def row(codec, time_s, best=None, link="1gbit", size=64 * MiB, bits=None):
    r = {"link": link, "link_bps": 10**9 if link != "local" else 0, "nranks": 4, "collective": "allreduce",
         "codec": codec, "bits": bits, "size": size, "algo": "auto", "time_s": time_s, "mpi_time_s": 1.4,
         "fp16_time_s": 0.5, "wire_bytes": 3.5e6, "speedup_vs_mpi": 1.4 / time_s}
    if best is not None:
        r.update(best_uncompressed="gloo_allreduce", best_uncompressed_time_s=best, speedup_vs_best=best / time_s)
    r["label"] = R.label(r)
    return r


def test_targets_use_x_best():
    rows = [row("onebit", 0.05, best=0.85), row("maxmin", 0.2, best=0.85, bits=4), row("fp16", 0.5, best=0.85),
            row("fp32", 0.1, best=0.09, link="local", size=16 * MiB)]
    tg = {name.split(":")[-1].strip(): (ok, d) for name, ok, d in R.targets(R.index(rows), rows)}
    assert tg["onebit >= 15x the best uncompressed path"][0] is True  # 17x
    assert "gloo_allreduce" in tg["onebit >= 15x the best uncompressed path"][1]
    assert tg["maxmin4 >= 5x the best uncompressed path"][0] is False  # 4.25x
    assert tg["fp16 >= 1.8x the best uncompressed path"][0] is False  # 1.7x
    local = [v for k, v in tg.items() if "auto with nothing to compress" in k][0]
    assert local[0] is False and "0.90x" in local[1]


def test_rows_without_best_are_not_measured_and_show_a_dash():
    rows = [row("onebit", 0.07)]
    ix = R.index(rows)
    onebit = [t for t in R.targets(ix, rows) if "onebit >=" in t[0]][0]
    assert onebit[1] is None and onebit[2] == "not measured in this run"
    table = "\n".join(R.time_tables(ix, rows))
    assert "70.0 (-, 20.00x)" in table


def test_table_cells_give_x_best_then_x_mpi():
    rows = [row("onebit", 0.1, best=0.8)]
    table = "\n".join(R.time_tables(R.index(rows), rows))
    assert "100.0 (8.00x, 14.00x)" in table and "800.0 gloo_allreduce" in table


def _results(tmp_path, text):
    p = tmp_path / "RESULTS.md"
    p.write_text(text)
    return p


HAND = ("# qccl benchmark results\n\n## Summary\n\n- a hand-written bullet\n\n" + R.SUM_BEGIN + "\n- old\n" + R.SUM_END +
        "\n\n## Codecs\n\ncodec text\n\n" + R.SECTION + "\n\n### A hand-written subsection\n\nits text\n\n"
        "### Another one\n\nmore text\n\n## Training\n\ntraining text\n")


def test_write_results_keeps_the_hand_written_subsections(tmp_path):
    p = _results(tmp_path, HAND)
    R.write_results(str(p), ["### The last default-matrix run", "", "run one"], ["- Emulated cluster: new"])
    first = p.read_text()
    for kept in ("a hand-written bullet", "codec text", "### A hand-written subsection", "its text",
                 "### Another one", "more text", "## Training", "training text"):
        assert kept in first
    assert "- old" not in first and "- Emulated cluster: new" in first
    # The block sits right under the section's heading, before the hand-written subsections.
    assert first.index(R.SECTION) < first.index(R.REPORT_BEGIN) < first.index("run one") < first.index(R.REPORT_END) \
        < first.index("### A hand-written subsection")
    # A second run replaces the block, and only the block.
    R.write_results(str(p), ["### The last default-matrix run", "", "run two"], ["- Emulated cluster: newer"])
    second = p.read_text()
    assert "run one" not in second and "run two" in second
    assert second.count(R.REPORT_BEGIN) == 1 and second.count(R.SUM_BEGIN) == 1
    assert second.replace("run two", "run one").replace("newer", "new") == first


def test_write_results_adds_the_section_where_it_is_missing(tmp_path):
    p = _results(tmp_path, "# qccl benchmark results\n\n## Summary\n\n- x\n\n## Codecs\n\ncodec text\n")
    R.write_results(str(p), ["generated"], ["- Emulated cluster: s"])
    text = p.read_text()
    assert "codec text" in text and text.index("codec text") < text.index(R.SECTION) < text.index("generated")
    assert text.index(R.SUM_BEGIN) < text.index("## Codecs")
