"""Data-parallel training on scikit-learn's bundled digits with four gradient exchanges.

Run with one command (4 ranks on this machine; see README.md):

    examples/python/run.sh

Every rank is an MPI process. DDP gets a gloo process group; the qccl variants send the gradients
through a qccl communicator made from mpi4py's COMM_WORLD. The variants train the same model from
the same initial weights on the same batches, so only the gradient exchange differs:

  fp32     DDP's default allreduce (gloo)
  fp16     DDP's fp16_compress_hook (gloo, gradients cast to fp16)
  onebit   qccl.torch.allreduce_hook, 1-bit SGD with error feedback
  maxmin4  qccl.torch.allreduce_hook, 4-bit min/max quantization with error feedback

Rank 0 prints the final test accuracy and the mean step time of each, writes results.json and the
loss curves as a PNG.
"""

import argparse
import copy
import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from mpi4py import MPI
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook
from torch.nn.parallel import DistributedDataParallel as DDP

import qccl
import qccl.torch as qtorch
from bench_ddp import init_gloo  # the rendezvous of the DDP benchmark beside this script

VARIANTS = ("fp32", "fp16", "onebit", "maxmin4")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--batch", type=int, default=64, help="global batch size (split over the ranks)")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warmup-steps", type=int, default=0, help="uncompressed steps of the qccl variants")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset of " + ",".join(VARIANTS))
    ap.add_argument("--replot", metavar="RESULTS_JSON", help="only redraw the PNG from a saved results.json")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "out"))
    return ap.parse_args()


def load_data(seed):
    digits = load_digits()  # 1797 8x8 images bundled with scikit-learn: no download
    x = digits.data.astype(np.float32) / 16.0
    x_tr, x_te, y_tr, y_te = train_test_split(x, digits.target, test_size=0.25, random_state=seed,
                                              stratify=digits.target)
    mean, std = x_tr.mean(0), x_tr.std(0) + 1e-3

    def norm(a):
        return torch.from_numpy((a - mean) / std)

    return norm(x_tr), torch.from_numpy(y_tr), norm(x_te), torch.from_numpy(y_te)


def make_model(hidden, seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, hidden // 2), nn.ReLU(),
                         nn.Linear(hidden // 2, 10))


def accuracy(model, x, y):
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean()) * 100.0


def train(variant, base, data, args, mpi, comm):
    x_tr, y_tr, x_te, y_te = data
    ddp = DDP(copy.deepcopy(base))
    state = None
    if variant == "fp16":
        ddp.register_comm_hook(None, fp16_compress_hook)
    elif variant in ("onebit", "maxmin4"):
        codec, bits = ("onebit", None) if variant == "onebit" else ("maxmin", 4)
        state = qtorch.HookState(comm, codec=codec, bits=bits, warmup_steps=args.warmup_steps)
        ddp.register_comm_hook(state, qtorch.allreduce_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    local = args.batch // mpi.size
    gen = torch.Generator().manual_seed(args.seed)  # same batches for every variant and rank
    losses, step_times, test_acc = [], [], []
    stats0 = comm.stats()
    steps_per_epoch = len(x_tr) // args.batch
    for _ in range(args.epochs):
        perm = torch.randperm(len(x_tr), generator=gen)
        for s in range(steps_per_epoch):
            idx = perm[s * args.batch + mpi.rank * local:s * args.batch + (mpi.rank + 1) * local]
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(ddp(x_tr[idx]), y_tr[idx])
            loss.backward()
            opt.step()
            step_times.append(time.perf_counter() - t0)
            losses.append(loss.item())
        test_acc.append(accuracy(ddp.module, x_te, y_te))
    stats1 = comm.stats()
    steps = len(losses)
    # the mean over ranks of each step's local loss: one collective at the end, outside the timing
    losses = mpi.allreduce(np.array(losses), op=MPI.SUM) / mpi.size
    return {
        "variant": variant,
        "test_accuracy": test_acc[-1],
        "test_accuracy_per_epoch": test_acc,
        "train_accuracy": accuracy(ddp.module, x_tr, y_tr),
        "step_time_ms": 1e3 * float(np.median(step_times[5:])),
        "loss": losses.tolist(),
        "qccl_bytes_sent_per_step": (stats1["bytes_sent"] - stats0["bytes_sent"]) / steps,
        "fp32_gradient_bytes": 4 * sum(p.numel() for p in base.parameters()),
        "steps": steps,
    }


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    # Distinct dashes: curves that track fp32 closely would otherwise hide it.
    styles = {"fp32": ("black", "-", 2.4), "fp16": ("tab:orange", "--", 1.6), "onebit": ("tab:green", "-", 1.2),
              "maxmin4": ("tab:red", ":", 1.8)}
    for r in results:
        color, dash, width = styles.get(r["variant"], (None, "-", 1.2))
        loss = np.asarray(r["loss"])
        k = 20
        smooth = np.convolve(loss, np.ones(k) / k, mode="valid")
        ax1.plot(np.arange(k - 1, len(loss)), smooth, color=color, ls=dash, lw=width,
                 label=f"{r['variant']} ({r['test_accuracy']:.1f}%)")
        ax2.plot(np.arange(1, len(r["test_accuracy_per_epoch"]) + 1), r["test_accuracy_per_epoch"], color=color,
                 ls=dash, lw=width, label=r["variant"])
    ax1.set(xlabel="step", ylabel="training loss (mean over ranks, 20-step average)", yscale="log",
            title="digits MLP, DDP on 4 ranks")
    ax2.set(xlabel="epoch", ylabel="test accuracy (%)", ylim=(85, 100), title="test accuracy")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    args = parse_args()
    if args.replot:
        with open(args.replot) as f:
            results = json.load(f)["results"]
        plot(results, os.path.join(os.path.dirname(os.path.abspath(args.replot)), "digits_loss.png"))
        return
    variants = [v for v in args.variants.split(",") if v]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"unknown variants {sorted(unknown)}; choose from {VARIANTS}")
    mpi = MPI.COMM_WORLD
    if args.batch % mpi.size:
        raise SystemExit(f"--batch {args.batch} must be a multiple of the {mpi.size} ranks")
    init_gloo(mpi)  # bench_ddp.py, beside this script
    torch.set_num_threads(1)  # ranks share the machine's cores
    comm = qccl.from_mpi(mpi)

    data = load_data(args.seed)
    base = make_model(args.hidden, args.seed)
    results = []
    for v in variants:
        results.append(train(v, base, data, args, mpi, comm))
        if mpi.rank == 0:
            r = results[-1]
            print(f"{v:8s} test accuracy {r['test_accuracy']:6.2f}%  train {r['train_accuracy']:6.2f}%  "
                  f"step {r['step_time_ms']:6.2f} ms  final loss {np.mean(r['loss'][-20:]):.4f}", flush=True)

    if mpi.rank == 0:
        os.makedirs(args.out, exist_ok=True)
        params = sum(p.numel() for p in base.parameters())
        print(f"\n{mpi.size} ranks, {params} parameters, {results[0]['steps']} steps of global batch {args.batch}")
        print(f"{'variant':8s} {'test acc %':>10s} {'vs fp32':>8s} {'step ms':>8s} {'qccl B/step':>12s}")
        ref = next((r["test_accuracy"] for r in results if r["variant"] == "fp32"), None)
        for r in results:
            delta = f"{r['test_accuracy'] - ref:+.2f}" if ref is not None else "-"
            sent = f"{r['qccl_bytes_sent_per_step']:.0f}" if r["variant"] in ("onebit", "maxmin4") else "-"
            print(f"{r['variant']:8s} {r['test_accuracy']:10.2f} {delta:>8s} {r['step_time_ms']:8.2f} {sent:>12s}")
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump({"args": vars(args), "ranks": mpi.size, "parameters": params, "results": results}, f, indent=1)
        plot(results, os.path.join(args.out, "digits_loss.png"))
        print(f"wrote {args.out}/results.json and {args.out}/digits_loss.png")
    comm.destroy()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
