"""One task, one seed, several gradient exchanges: the per-rank program of the convergence suite.

    mpirun -np 4 python bench/convergence/train.py --task ts-sgdm --seed 0 --variants fp32,onebit,onebit+m \\
        --out results/ts-sgdm-s0.json

Every rank is an MPI process; DDP runs on a gloo process group and the qccl variants send the
gradients through a qccl communicator made from mpi4py's COMM_WORLD. The variants of one run train
the same model from the same initial weights on the same batches, one after the other:

    fp32          DDP's default allreduce (gloo)
    fp16          DDP's fp16_compress_hook
    powersgd      DDP's PowerSGD hook (rank 2, error feedback, 10 uncompressed steps)
    CODEC         qccl.torch.allreduce_hook with CODEC (onebit, signscale, maxmin2, maxmin4, maxmin8,
                  dyn8), error feedback on the gradients: HookState without optimizer=
    CODEC+m       the same with HookState(..., optimizer=opt): momentum-aware, default scheme
    CODEC+SCHEME  with optimizer= and scheme SCHEME (dgc, ef21, onebit_adam, plain)
    none          the qccl hook with codec none: fp32 like `fp32`, summed by qccl in another order
                  (on one host in its shared-memory segment). Its ratio to `fp32` is the task's noise
                  floor: how far rounding differences alone move the final loss

Rank 0 evaluates the (identical) model on the task's test set every --eval-every steps and writes
one JSON file with every variant's curves, final test loss/accuracy, whether the replicas ended
bit-identical, wall time and qccl's bytes per step. Each evaluation records the training time so
far (``time_s``: wall time of the steps, evaluations left out), for time-to-target
(``time_to_target.py``). On the emulated cluster (``bench/cluster/launch`` sets GLOO_SOCKET_IFNAME)
DDP's gloo group meets at rank 0's address on that interface.
"""

import argparse
import copy
import hashlib
import json
import os
import sys
import time
from typing import Any, Dict, List, Optional

import numpy as np
import torch
import torch.distributed as dist
from mpi4py import MPI
from torch.nn.parallel import DistributedDataParallel as DDP

_here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _here)
sys.path.insert(1, os.path.join(_here, "..", "..", "examples", "python"))
import qccl  # noqa: E402
import qccl.torch as qtorch  # noqa: E402
from qccl.momentum import SCHEMES, default_scheme  # noqa: E402
import bench_ddp  # noqa: E402  (the DDP benchmark's rendezvous helpers)
from bench_ddp import interface_address  # noqa: E402
from tasks import TASKS, Task  # noqa: E402

CODECS = {"none": ("none", None), "onebit": ("onebit", None), "signscale": ("signscale", None), "maxmin2": ("maxmin", 2),
          "maxmin4": ("maxmin", 4), "maxmin8": ("maxmin", 8), "dyn8": ("dyn8", None), "fp16q": ("fp16", None)}
BASELINES = ("fp32", "fp16", "powersgd")


def parse_variant(v: str):
    """(kind, codec, bits, scheme): kind is a baseline name or 'qccl'; scheme None = no optimizer=."""
    if v in BASELINES:
        return v, None, None, None
    codec, _, opt = v.partition("+")
    if codec not in CODECS:
        raise SystemExit(f"unknown variant {v!r}: codec {codec!r} not in {sorted(CODECS)}")
    if opt and opt != "m" and opt not in SCHEMES:
        raise SystemExit(f"unknown variant {v!r}: after '+' use m or one of {SCHEMES}")
    name, bits = CODECS[codec]
    return "qccl", name, bits, (opt if opt else None)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", required=True, choices=sorted(TASKS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--variants", default="fp32,onebit,onebit+m")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the task's steps (the CTest subset uses < 1)")
    ap.add_argument("--constant-lr", action="store_true", help="keep the peak learning rate after the warm-up")
    ap.add_argument("--algo", choices=("sra", "allgather"), help="qccl algorithm (default: the hook's choice)")
    ap.add_argument("--hook-warmup", type=int, default=-1,
                    help="HookState warmup_steps; -1 (default): what the README recommends, 20%% of the steps with "
                    "maxmin 4-bit for the 1-bit codecs with optimizer= under SGD momentum, 10%% uncompressed for "
                    "onebit_adam, 0 otherwise")
    ap.add_argument("--clip", type=float, default=0.0, help="clip_grad_norm_ to this norm after backward (0: off)")
    ap.add_argument("--clip-in-hook", action="store_true",
                    help="qccl variants: clip in the hook, HookState(..., clip_grad_norm=CLIP), instead of after "
                    "backward")
    ap.add_argument("--hook-clip", type=float, default=0.0,
                    help="with --clip-in-hook: the clip_grad_norm HookState gets (default: --clip; each rank is "
                    "clipped to it times sqrt(ranks)), while fp32 still clips to --clip after backward")
    ap.add_argument("--reconcile", choices=("auto", "true", "false"), default="auto",
                    help="CODEC+m variants: HookState(..., reconcile=...): auto (the hook's default), true or false "
                    "(qccl.momentum, \"Reconciliation\")")
    ap.add_argument("--no-reconcile", dest="reconcile", action="store_const", const="false",
                    help="the same as --reconcile false")
    ap.add_argument("--feedback-gain", type=float, default=None,
                    help="qccl variants: HookState(..., feedback_gain=...) (default: the hook's choice)")
    ap.add_argument("--min-compress-numel", type=int, default=None,
                    help="qccl variants: HookState(..., min_compress_numel=...), the smallest tensor compressed "
                    "(default: the hook's, 4096)")
    ap.add_argument("--warmup-codec", choices=sorted(CODECS), default=None,
                    help="qccl variants: HookState(..., warmup_codec=..., warmup_bits=...), the codec of the warm-up "
                    "steps (default: the hook's, none = fp32)")
    ap.add_argument("--rotation", default=None,
                    help="CODEC+m variants: HookState(..., rotation=...): auto, 0 (none) or a block (default: the "
                    "hook's, auto)")
    ap.add_argument("--eval-every", type=int, default=25)
    ap.add_argument("--out", help="JSON file written by rank 0")
    return ap.parse_args()


def evaluate(model: torch.nn.Module, task: Task) -> Dict[str, float]:
    x, y = task.test
    with torch.no_grad():
        out = model(x)
        res = {"loss": float(task.loss(out, y))}
        if task.classification:
            res["acc"] = 100.0 * float((out.argmax(-1) == y).float().mean())
    return res


def params_digest(model: torch.nn.Module) -> str:
    h = hashlib.sha1()
    for p in model.parameters():
        h.update(p.detach().cpu().numpy().tobytes())
    return h.hexdigest()


def make_hook(kind: str, ddp: DDP, opt, codec, bits, scheme, args, task: Task, mpi, seed: int):
    """Registers the variant's communication hook; returns (qccl communicator or None, HookState or None)."""
    if kind == "fp32":
        return None, None
    if kind == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook

        ddp.register_comm_hook(None, fp16_compress_hook)
        return None, None
    if kind == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

        state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=2, start_powerSGD_iter=10,
                                   min_compression_rate=2, use_error_feedback=True, warm_start=True, random_seed=seed)
        ddp.register_comm_hook(state, psgd.powerSGD_hook)
        return None, None
    comm = qccl.from_mpi(mpi, timeout=120.0)
    kw: Dict[str, Any] = dict(codec=codec, bits=bits, algo=args.algo)
    warm = max(0, args.hook_warmup)
    if scheme is not None:
        kw["optimizer"] = opt
        if scheme != "m":
            kw["scheme"] = scheme
        kw["reconcile"] = {"auto": "auto", "true": True, "false": False}[args.reconcile]
        if args.rotation is not None:
            kw["rotation"] = args.rotation if args.rotation == "auto" else int(args.rotation)
        # By default the run warms up as the README tells a user who knows the run length to: 10% of
        # it uncompressed for onebit_adam (the hook's default for Adam/AdamW with a lossy codec), a
        # fifth of it with maxmin 4-bit for the 1-bit codecs under SGD momentum (bench/RESULTS.md,
        # "Small tensors in fp32 and a compressed warm-up")
        chosen = default_scheme(opt, lossless=False) if scheme == "m" else scheme  # every codec here is lossy
        one_bit_sgd = codec in ("onebit", "signscale") and isinstance(opt, torch.optim.SGD) and chosen != "plain"
        if args.hook_warmup < 0 and chosen == "onebit_adam":
            warm = max(1, task.steps // 10)
        elif args.hook_warmup < 0 and one_bit_sgd:
            warm = max(1, task.steps // 5)
            if args.warmup_codec is None:
                kw["warmup_codec"], kw["warmup_bits"] = CODECS["maxmin4"]
    if args.feedback_gain is not None:
        kw["feedback_gain"] = args.feedback_gain
    if args.min_compress_numel is not None:
        kw["min_compress_numel"] = args.min_compress_numel
    if args.warmup_codec is not None:
        kw["warmup_codec"], kw["warmup_bits"] = CODECS[args.warmup_codec]
    if args.clip > 0 and args.clip_in_hook:
        kw["clip_grad_norm"] = args.hook_clip or args.clip
    state = qtorch.HookState(comm, warmup_steps=warm, **kw)
    ddp.register_comm_hook(state, qtorch.allreduce_hook)
    return comm, state


def quiet_barrier(mpi) -> None:
    """A barrier whose waiting ranks sleep (MPI's spins, and would take the cores rank 0 evaluates on)."""
    req = mpi.Ibarrier()
    while not req.Test():
        time.sleep(0.001)


def train_variant(variant: str, task: Task, base: torch.nn.Module, args, mpi) -> Dict[str, Any]:
    kind, codec, bits, scheme = parse_variant(variant)
    ddp = DDP(copy.deepcopy(base))
    opt = task.make_optimizer(ddp.parameters())
    comm, state = make_hook(kind, ddp, opt, codec, bits, scheme, args, task, mpi, args.seed)
    stats0 = comm.stats() if comm else None
    losses: List[float] = []
    norms: List[float] = []  # with --clip: the total gradient norm clip_grad_norm_ saw at each step
    evals: List[Dict[str, float]] = []
    error: Optional[str] = None
    t0 = time.perf_counter()
    eval_s = 0.0  # time spent evaluating, left out of the evaluations' time_s
    try:
        for step in range(task.steps):
            lr = task.lr_at(step, args.constant_lr)
            for group in opt.param_groups:
                group["lr"] = lr
            x, y = task.batch_for(step, mpi.rank, mpi.size)
            opt.zero_grad(set_to_none=True)
            loss = (task.train_loss or task.loss)(ddp(x), y)
            loss.backward()
            if args.clip > 0 and args.clip_in_hook and state is not None:
                norms.append(float(state.last_local_grad_norm))
            elif args.clip > 0:
                norms.append(float(torch.nn.utils.clip_grad_norm_(ddp.parameters(), args.clip)))
            opt.step()
            losses.append(float(loss))
            if (step + 1) % args.eval_every == 0 or step + 1 == task.steps:
                # Every rank stops the clock together, so no rank's wait for rank 0's evaluation
                # counts as training time.
                quiet_barrier(mpi)
                e0 = time.perf_counter()
                if mpi.rank == 0:
                    evals.append(dict(step=step + 1, time_s=e0 - t0 - eval_s, **evaluate(ddp.module, task)))
                quiet_barrier(mpi)
                eval_s += time.perf_counter() - e0
            if not np.isfinite(losses[-1]):
                error = f"non-finite loss at step {step}"
                break
    except Exception as e:  # noqa: BLE001 - a crashing baseline (PowerSGD on gloo) is a result too
        error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    wall = time.perf_counter() - t0
    # Every rank must agree on success before the next collective.
    failed = mpi.allreduce(1 if error else 0, op=MPI.MAX)
    res: Dict[str, Any] = {"variant": variant, "wall_s": wall, "train_s": wall - eval_s, "steps": task.steps}
    if state is not None:
        res["hook_warmup_steps"] = state.warmup_steps
        res["hook_warmup_codec"] = state.warmup_codec + (str(state.warmup_bits) if state.warmup_bits else "")
        res["algo"] = state.algo
        res["small_call_numel"] = state.small_call_numel  # quantized calls below it take allgather
        res["feedback_gain"] = state.feedback_gain
        # each compressed call's rotation block (0: none), as the hook decided it
        res["rotation"] = sorted(b for plan in state._plans.values() for b in plan.rotation.values())
        # where rotation="auto" decided: the codec's error rotated / plain (below 0.9: rotated)
        res["rotation_share"] = sorted(round(v, 4) for plan in state._plans.values()
                                       for v in plan.rotation_share.values())
    if failed:
        errors = [e for e in mpi.allgather(error) if e]
        res["error"] = errors[0] if errors else "failed on another rank"
    else:
        steps = mpi.allreduce(len(losses), op=MPI.MIN)
        mean = mpi.allreduce(np.array(losses[:steps]), op=MPI.SUM) / mpi.size
        res["train_loss"] = mean.tolist()
        digests = mpi.allgather(params_digest(ddp.module))
        res["replicas_identical"] = all(d == digests[0] for d in digests)
        res["evals"] = evals
        if evals:
            res["test_loss"] = evals[-1]["loss"]
            res["test_acc"] = evals[-1].get("acc")
        if norms:
            # The norm the clipping saw: after backward, that of what the optimizer is handed (the
            # hook's direction, the same on every rank), clipped to --clip; with --clip-in-hook, rank
            # 0's own gradient, clipped to --clip * sqrt(ranks) (HookState's clip_grad_norm).
            hook = args.clip_in_hook and state is not None
            limit = (args.hook_clip or args.clip) * mpi.size**0.5 if hook else args.clip
            res["grad_norm_median"] = float(np.median(norms))
            res["clip_limit"] = limit
            res["clipped_steps"] = int(sum(n > limit for n in norms))
    if comm is not None:
        stats1 = comm.stats()
        res["qccl_bytes_sent_per_step"] = (stats1["bytes_sent"] - stats0["bytes_sent"]) / max(1, len(losses))
        comm.destroy()
    del ddp
    return res


def init_gloo(mpi) -> None:
    addr = None
    if mpi.rank == 0:
        ifname = os.environ.get("GLOO_SOCKET_IFNAME")
        addr = interface_address(ifname) if ifname else "127.0.0.1"
    bench_ddp.init_gloo(mpi, mpi.bcast(addr, root=0))


def main() -> None:
    args = parse_args()
    variants = [v for v in args.variants.split(",") if v]
    for v in variants:
        parse_variant(v)
    mpi = MPI.COMM_WORLD
    torch.set_num_threads(1)  # the ranks share the machine's cores
    init_gloo(mpi)
    task = TASKS[args.task](args.seed, args.scale)
    base = task.make_model()
    results = []
    for v in variants:
        r = train_variant(v, task, base, args, mpi)
        results.append(r)
        if mpi.rank == 0:
            if "error" in r:
                print(f"{task.name} seed {args.seed} {v:16s} FAILED: {r['error']}", flush=True)
            else:
                acc = f" acc {r['test_acc']:.2f}%" if r.get("test_acc") is not None else ""
                print(f"{task.name} seed {args.seed} {v:16s} test loss {r['test_loss']:.5f}{acc} "
                      f"replicas {'identical' if r['replicas_identical'] else 'DIFFER'} {r['wall_s']:.1f} s", flush=True)
    if mpi.rank == 0 and args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        meta = {"task": task.name, "seed": args.seed, "ranks": mpi.size, "steps": task.steps,
                "batch_per_rank": task.batch, "lr": task.lr, "constant_lr": args.constant_lr, "algo": args.algo,
                "clip": args.clip, "clip_in_hook": args.clip_in_hook,
                "hook_clip": args.hook_clip or None, "reconcile": args.reconcile,
                "torch": torch.__version__,
                "parameters": sum(p.numel() for p in base.parameters())}
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "results": results}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
