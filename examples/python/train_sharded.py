"""Sharded data-parallel training (FSDP / ZeRO style) on scikit-learn's digits with qccl.

Run on 4 local ranks (mpi4py's COMM_WORLD):

    mpirun -np 4 python examples/python/train_sharded.py

The model's parameters live in one flat fp32 vector, padded to a multiple of the rank count and
cut into equal shards: rank r owns shard r, its optimizer state included (nothing else is kept
between steps). Every step:

  1. the full parameters are allgathered from the shards (exact: codec none);
  2. forward and backward on this rank's part of the global batch;
  3. the flat gradient is reduce-scattered with qccl (average over ranks), compressed with the
     variant's codec and error feedback keyed by a tensor id: rank r receives shard r only;
  4. the optimizer steps the shard.

Momentum and 1-bit codecs: SGD's momentum on top of error-compensated 1-bit gradients integrates
the codec's error (bench/RESULTS.md, "Momentum-aware compression"). A variant with the suffix "+m"
(e.g. onebit+m) applies momentum correction (Lin et al., "Deep Gradient Compression", ICLR 2018)
as the sharded setting allows: each rank keeps the momentum of its own full gradient,
u = 0.9 u + g, and reduce-scatters u (error feedback in momentum units); the shard's optimizer is
then plain SGD on the averaged momentum, the same update as SGD with momentum 0.9. It costs one
full-size vector per rank, as DGC does.

Each variant trains the same model from the same weights on the same batches, so only the
gradient exchange differs. Rank 0 prints the final test loss and accuracy of each variant
and its ratio to the uncompressed run; with --check it exits 1 when a variant's loss exceeds
--tolerance times the uncompressed one.
"""

import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from mpi4py import MPI

import qccl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_digits import accuracy, load_data, make_model  # noqa: E402  (same data and model)

CODECS = {"none": ("none", 0), "fp16": ("fp16", 0), "onebit": ("onebit", 0), "maxmin4": ("maxmin", 4),
          "maxmin8": ("maxmin", 8)}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--batch", type=int, default=64, help="global batch size (split over the ranks)")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--variants", default="none,onebit,onebit+m,maxmin4",
                    help="codecs from " + ",".join(CODECS) + ", each optionally with +m (SGD only)")
    ap.add_argument("--optimizer", choices=("sgd", "adamw"), default="sgd",
                    help="sgd: momentum 0.9; adamw: Adam with decoupled weight decay 0.01")
    ap.add_argument("--check", action="store_true", help="exit 1 if a variant misses --tolerance")
    ap.add_argument("--tolerance", type=float, default=1.10, help="allowed final test loss / uncompressed")
    ap.add_argument("--json", help="rank 0 writes the results here")
    return ap.parse_args()


class Sharded:
    """The model's parameters as views of one flat vector; this rank's shard and its optimizer."""

    def __init__(self, model, comm, optimizer, lr, momentum_correction=False):
        self.model, self.comm = model, comm
        params = list(model.parameters())
        n = sum(p.numel() for p in params)
        self.k = math.ceil(n / comm.size)  # shard length; the last shard carries the padding
        self.flat = torch.zeros(self.k * comm.size)
        self.grad = torch.zeros_like(self.flat)
        offset = 0
        for p in params:  # every parameter and gradient becomes a view of the flat vectors
            m = p.numel()
            self.flat[offset:offset + m].copy_(p.data.reshape(-1))
            p.data = self.flat[offset:offset + m].view_as(p)
            p.grad = self.grad[offset:offset + m].view_as(p)
            offset += m
        self.grad_ptrs = [p.grad.data_ptr() for p in params]
        r = comm.rank
        self.shard = torch.nn.Parameter(self.flat[r * self.k:(r + 1) * self.k].clone())
        self.shard.grad = torch.zeros_like(self.shard)
        self.velocity = torch.zeros_like(self.flat) if momentum_correction else None
        if optimizer == "sgd":
            self.opt = torch.optim.SGD([self.shard], lr=lr, momentum=0.0 if momentum_correction else 0.9)
        else:
            self.opt = torch.optim.AdamW([self.shard], lr=lr, weight_decay=0.01)

    def gather_parameters(self):
        self.comm.allgather(self.shard.data, out=self.flat, codec="none")

    def step(self, codec, bits, tensor_id):
        # Sum of the ranks' mean losses / size: the gradient of the global batch's mean loss.
        message = self.grad
        if self.velocity is not None:
            message = self.velocity.mul_(0.9).add_(self.grad)
        self.comm.reduce_scatter(message, out=self.shard.grad, op="avg", codec=codec, bits=bits,
                                 tensor_id=tensor_id)
        self.opt.step()
        self.grad.zero_()


def train(variant, tensor_id, args, comm, data):
    x_tr, y_tr, x_te, y_te = data
    name, corrected = (variant[:-2], True) if variant.endswith("+m") else (variant, False)
    if corrected and args.optimizer != "sgd":
        raise SystemExit(f"{variant}: +m (momentum correction) is for --optimizer sgd")
    codec, bits = CODECS[name]
    lr = args.lr if args.optimizer == "sgd" else args.lr / 50
    net = Sharded(make_model(args.hidden, args.seed), comm, args.optimizer, lr, corrected)
    local = args.batch // comm.size
    rng = np.random.default_rng(args.seed)  # the same permutation on every rank
    steps = 0
    sent0 = comm.stats()["bytes_sent"]
    for _ in range(args.epochs):
        order = rng.permutation(len(x_tr))
        for b in range(len(order) // args.batch):
            idx = order[b * args.batch + comm.rank * local:b * args.batch + (comm.rank + 1) * local]
            net.gather_parameters()
            loss = F.cross_entropy(net.model(x_tr[idx]), y_tr[idx])
            loss.backward()
            if steps == 0:  # autograd accumulated into the flat gradient, not into new tensors
                assert all(p.grad.data_ptr() == q for p, q in zip(net.model.parameters(), net.grad_ptrs))
            net.step(codec, bits, tensor_id)
            steps += 1
    sent = comm.stats()["bytes_sent"] - sent0
    net.gather_parameters()
    comm.release(tensor_id)  # the residuals of this run
    with torch.no_grad():
        test_loss = float(F.cross_entropy(net.model(x_te), y_te))
    # The parameters are bit-identical on every rank (allgathered from the same shards).
    digest = float(net.flat.double().sum())
    digests = MPI.COMM_WORLD.allgather(digest)
    assert all(d == digests[0] for d in digests), f"parameters differ across ranks: {digests}"
    return {"variant": variant, "test_loss": test_loss, "accuracy": accuracy(net.model, x_te, y_te), "steps": steps,
            "bytes_sent_per_step": sent / max(steps, 1), "shard_elements": net.k, "optimizer": args.optimizer}


def main():
    args = parse_args()
    world = MPI.COMM_WORLD
    comm = qccl.from_mpi(world, min_compress_bytes=0)
    data = load_data(args.seed)
    # Each variant keys its error-feedback residuals by its own tensor id.
    results = [train(v, 1 + i, args, comm, data) for i, v in enumerate(args.variants.split(","))]
    comm.destroy()
    if world.rank != 0:
        return 0
    base = next((r for r in results if r["variant"] == "none"), None)
    failed = False
    print(f"sharded training, {world.size} ranks, {args.epochs} epochs, {args.optimizer}, "
          f"{results[0]['steps']} steps, {results[0]['shard_elements']} elements per shard")
    for r in results:
        ratio = r["test_loss"] / base["test_loss"] if base else float("nan")
        r["loss_vs_none"] = ratio
        miss = base is not None and ratio > args.tolerance
        failed = failed or miss
        print(f"  {r['variant']:8s} test loss {r['test_loss']:.4f} ({ratio:.3f}x none)  accuracy "
              f"{r['accuracy']:.1f}%  {r['bytes_sent_per_step'] / 1e3:.0f} kB sent per step"
              f"{'  MISSED' if miss else ''}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)
    return 1 if (args.check and failed) else 0


if __name__ == "__main__":
    sys.exit(main())
