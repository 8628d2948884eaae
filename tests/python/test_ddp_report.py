"""bench/ddp_report.py's arithmetic, and examples/python/bench_ddp.py end to end on 2 local ranks
(every variant, PowerSGD and --bucket-view included) feeding the report and its plot."""

import json
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "bench"))
import ddp_report  # noqa: E402


def test_rates():
    assert ddp_report.rate_bps("1gbit") == 1e9
    assert ddp_report.rate_bps("2.5gbit") == 2.5e9
    assert ddp_report.rate_bps("500mbit") == 5e8
    assert ddp_report.rate_bps("none") is None
    assert ddp_report.ordered_links(["none", "2.5gbit", "500mbit", "1gbit"]) == ["500mbit", "1gbit", "2.5gbit", "none"]
    with pytest.raises(SystemExit):
        ddp_report.rate_bps("fast")


def test_crossover():
    # speedup 4 at 0.5 Gbit/s, 1 at ... falls through 1 between 1 and 2.5 Gbit/s: log-log interpolation
    pts = [(5e8, 4.0), (1e9, 2.0), (2.5e9, 0.5), (None, 0.4)]
    text = ddp_report.crossover(pts)
    assert "between 1 and 2.5" in text
    # log2 speedup falls from 1 to -1 over log(1e9)..log(2.5e9): crossing at the geometric middle
    assert f"{(1e9 * 2.5e9) ** 0.5 / 1e9:.2g}" in text
    assert ddp_report.crossover([(5e8, 3.0), (None, 0.9)]) == "between 0.5 Gbit/s and unshaped"
    assert ddp_report.crossover([(5e8, 3.0), (None, 1.2)]) == "pays at every rate measured"
    assert ddp_report.crossover([(5e8, 0.8), (None, 0.7)]) == "does not pay at any rate measured"


def fake_run(path, link, times, sent=1 << 20):
    results = [{"variant": v, "median_s": t, "min_s": t, "steps": 5} for v, t in times.items()]
    for r in results:
        if r["variant"].startswith("qccl-"):
            r["qccl_bytes_sent_per_step"] = sent
    with open(path, "w") as f:
        json.dump({"ranks": 4, "parameters": 1000, "results": results,
                   "args": {"batch": 1, "steps": 5, "warmup": 3, "link": link, "bucket_view": True}}, f)


def test_table(tmp_path):
    fake_run(tmp_path / "a.json", "1gbit", {"compute": 0.3, "fp32": 1.5, "fp16": 1.8, "qccl-onebit": 0.5})
    fake_run(tmp_path / "b.json", "none", {"compute": 0.3, "noop": 0.25, "fp32": 0.4, "fp16": 0.6, "qccl-onebit": 0.5})
    runs, _ = ddp_report.load([str(tmp_path / "a.json"), str(tmp_path / "b.json")])
    lines = ddp_report.table(1, runs[1])
    text = "\n".join(lines)
    assert "| 1 Gbit/s | 300 | - | 1500 | 1800 | 500 | fp32 1500 | 3.00x |" in text
    assert "| unshaped | 300 | 250 | 400 | 600 | 500 | fp32 400 | 0.80x | 2.00 |" in text  # floor: noop, no wire
    # floor + 1 MiB at 1 Gbit/s = 0.3 + 0.00839 s
    assert f"{0.5 / (0.3 + 8 * 2**20 / 1e9):.2f} |" in lines[4]
    assert "onebit: against the best uncompressed peer, between 1 Gbit/s and unshaped" in text


@pytest.mark.skipif(shutil.which(os.environ.get("QCCL_MPIEXEC", "mpirun")) is None, reason="no mpirun")
def test_bench_ddp_end_to_end(tmp_path):
    out = tmp_path / "b1_none.json"
    cmd = [os.environ.get("QCCL_MPIEXEC", "mpirun"), "--allow-run-as-root", "--oversubscribe", "-np", "2",
           sys.executable, os.path.join(REPO, "examples", "python", "bench_ddp.py"), "--width", "64", "--layers", "2",
           "--batch", "4", "--steps", "2", "--warmup", "3", "--baselines", "compute,noop,fp32,fp16,powersgd",
           "--codecs", "onebit,maxmin:4,onebit+m,onebit+m@sra,onebit+mu@sra,onebit+mn@sra,onebit+mp@sra",
           "--momentum", "0.9", "--rotation", "0", "--bucket-view", "--link", "none", "--json", str(out)]
    subprocess.run(cmd, check=True, timeout=240)
    d = json.loads(out.read_text())
    names = [r["variant"] for r in d["results"]]
    assert names == ["compute", "noop", "fp32", "fp16", "powersgd", "qccl-onebit", "qccl-maxmin:4", "qccl-onebit+m",
                     "qccl-onebit+m@sra", "qccl-onebit+mu@sra", "qccl-onebit+mn@sra",
                     "qccl-onebit+mp@sra"]
    algos = {r["variant"]: r.get("qccl_algo") for r in d["results"]}
    # 2 ranks: the hook's own choice is allgather; "@sra" overrides it for that variant only
    assert algos == {"compute": None, "noop": None, "fp32": None, "fp16": None, "powersgd": None,
                     "qccl-onebit": "allgather", "qccl-maxmin:4": "allgather", "qccl-onebit+m": "allgather",
                     "qccl-onebit+m@sra": "sra", "qccl-onebit+mu@sra": "sra", "qccl-onebit+mn@sra": "sra",
                     "qccl-onebit+mp@sra": "sra"}
    # "+m": optimizer= with its default reconcile="auto", "+mu": reconcile=False; the plain hook has no
    # momentum state to report
    assert {r["variant"]: r.get("qccl_reconcile") for r in d["results"] if r["variant"].startswith("qccl-")} == {
        "qccl-onebit": None, "qccl-maxmin:4": None, "qccl-onebit+m": "auto", "qccl-onebit+m@sra": "auto",
        "qccl-onebit+mu@sra": False, "qccl-onebit+mn@sra": "auto",
        "qccl-onebit+mp@sra": "auto"}
    # the last average packed (momentum.py, pack; by default where its AVX-512 pass runs): sra's onebit
    # averages pack, allgather's sums of two ranks' do not (the parameter is unpacked for good), +mn never,
    # +mp always
    import qccl

    packed = {r["variant"]: r.get("qccl_packed_share") for r in d["results"] if "+m" in r["variant"]}
    default = 1.0 if qccl._qccl._packed_sent_fast() else 0.0
    # --rotation 0: no call rotates or decides (a rotated call's average is not kept packed)
    assert {r["variant"]: r.get("qccl_rotation") for r in d["results"] if "+m" in r["variant"]} == {
        v: [] for v in packed}
    assert packed == {"qccl-onebit+m": 0.0, "qccl-onebit+m@sra": default, "qccl-onebit+mu@sra": default,
                      "qccl-onebit+mn@sra": 0.0, "qccl-onebit+mp@sra": 1.0}
    assert d["args"]["bucket_view"] is True
    for r in d["results"]:
        assert r["median_s"] > 0
        if r["variant"].startswith("qccl-"):
            assert r["qccl_bytes_sent_per_step"] > 0  # the hook really went through qccl
    png = tmp_path / "plot.png"
    rep = subprocess.run([sys.executable, os.path.join(REPO, "bench", "ddp_report.py"), "--plot", str(png), str(out)],
                         check=True, capture_output=True, text=True, timeout=120)
    assert "| unshaped |" in rep.stdout and "x_powersgd" in rep.stdout
    assert png.stat().st_size > 10_000
