"""Times DDP training steps of a large MLP with each gradient exchange, in the same run.

    mpirun -np 4 python examples/python/bench_ddp.py                       # local ranks
    bench/cluster/up 4 1gbit && bench/cluster/launch -n 4 \\
        .venv/bin/python examples/python/bench_ddp.py --json out.json       # emulated 1 Gbit/s hosts

Variants: compute (the same ranks running forward, backward and the optimizer step with no
communication at all: the floor), noop (DDP with a hook that returns the bucket untouched: DDP's
own cost; on request), fp32 (DDP's default gloo allreduce), fp16 (DDP's fp16_compress_hook),
powersgd (DDP's PowerSGD hook, rank --powersgd-rank, error feedback and warm start on, compressing
from the second step, in as few buckets as DDP allows; on request) and the qccl hook with each
codec given by --codecs (default onebit and maxmin 4-bit; a codec with the suffix +m, e.g.
onebit+m, hands the hook the optimizer: momentum-aware compression, HookState(optimizer=opt), with
its default reconcile="auto"; +mu does so with reconcile=False, +mr with reconcile=True, +ma with
every momentum pass outside the exchange, as before 2026-11-28: MomentumCorrection.fuse = False;
+mn with the last average never packed and +mp with it always packed: MomentumCorrection.pack =
False / True, instead of the default that depends on the CPU).
Every variant steps with the same optimizer, plain SGD or with --momentum SGD with momentum. Each
variant runs --warmup untimed
steps and then --steps timed ones on the same synthetic batch; rank 0 prints the median step
time, the speedup over the faster of fp32 and fp16, the ratio to the compute floor, and where
the step goes: forward, backward (DDP waits for the last bucket's future at its end), optimizer,
the CPU time the rank used, the time inside the hook function itself (bucket planning and enqueue,
on the backward thread) and qccl's own encode, decode and wait seconds from the communicator's
counters. --json writes it all.

Inside the emulated cluster the ranks sit in separate network namespaces: gloo then needs
GLOO_SOCKET_IFNAME (bench/cluster/launch sets it) and rank 0's address on that interface, which
this script finds by itself; --master-addr overrides it.
"""

import argparse
import copy
import datetime
import fcntl
import json
import os
import socket
import struct
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from mpi4py import MPI
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook
from torch.nn.parallel import DistributedDataParallel as DDP

import qccl
import qccl.torch as qtorch


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--width", type=int, default=2496, help="hidden width; 2496 with --layers 4 is 25.6M parameters")
    ap.add_argument("--layers", type=int, default=4, help="hidden layers of width x width")
    ap.add_argument("--batch", type=int, default=32, help="samples per rank")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--codecs", default="onebit,maxmin:4",
                    help="qccl codecs, codec[:bits][+m|+mu|+mr|+ma|+mn|+mp][+hc][%%R][/G][@algo] separated by commas; +m: "
                         "HookState(optimizer=opt); +mu / +mr: the same with reconcile=False / True; +ma: with "
                         "every momentum pass outside the exchange (fuse=False); +mn / +mp: the last average "
                         "never / always packed (pack=False / True); +hc: clip "
                         "in the hook "
                         "(--clip); %%R: HookState(..., rotation=R) (auto, 0 or a block; default: --rotation); "
                         "/G: HookState(..., feedback_gain=G) (error control; default: the hook's); "
                         "@sra or @allgather: that variant's algorithm (overrides --algo)")
    ap.add_argument("--algo", choices=("sra", "allgather"),
                    help="the qccl hook's algorithm for compressed parts (default: HookState's choice)")
    ap.add_argument("--rotation", default=None,
                    help="the +m variants' HookState(..., rotation=...): auto, 0 (none) or a block (default: the "
                    "hook's, auto)")
    ap.add_argument("--momentum", type=float, default=0.0,
                    help="SGD momentum of every variant's optimizer (0: plain SGD)")
    ap.add_argument("--clip", type=float, default=0.0,
                    help="clip_grad_norm_ to this norm after backward in every variant (0: off); a codec spec "
                    "ending in +hc clips in the hook instead: HookState(..., clip_grad_norm=CLIP)")
    ap.add_argument("--baselines", default="compute,fp32,fp16",
                    help="variants without qccl: compute (no communication: the floor), noop (DDP with a hook "
                         "that communicates nothing), fp32, fp16, powersgd")
    ap.add_argument("--powersgd-rank", type=int, default=2, help="PowerSGD's matrix approximation rank")
    ap.add_argument("--bucket-view", action="store_true",
                    help="DDP(gradient_as_bucket_view=True) for every variant: gradients live in the buckets "
                         "(and the compute floor keeps its gradients between steps, zeroed in place)")
    ap.add_argument("--transport", choices=("mpi", "ucx"), default="mpi",
                    help="qccl communicator: mpi4py's COMM_WORLD, or UCX bootstrapped at rank 0's address")
    ap.add_argument("--master-addr", help="rank 0's address for gloo (default: GLOO_SOCKET_IFNAME's, or 127.0.0.1)")
    ap.add_argument("--json", help="write the results here (rank 0)")
    ap.add_argument("--link", help="a label for the link the ranks run on (e.g. 1gbit), recorded in the JSON")
    return ap.parse_args()


def interface_address(ifname):
    """IPv4 address of a network interface (SIOCGIFADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", ifname[:15].encode()))
    return socket.inet_ntoa(packed[20:24])


def free_port(addr):
    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def init_gloo(mpi, addr="127.0.0.1", timeout_s=600.0):
    """torch.distributed's gloo group over the ranks of an mpi4py communicator. Rank 0's store
    listens on a port the OS picks, bound before any rank hears of it, and MPI hands the port to
    the others: no other process can take the port in between, as it can between closing a probe
    socket (free_port) and the store binding it. A rank 0 that cannot listen is an error on every
    rank, not ranks left waiting for a store that never comes."""
    timeout = datetime.timedelta(seconds=timeout_s)
    store, port, why = None, None, None
    if mpi.rank == 0:
        try:
            store = dist.TCPStore(addr, 0, mpi.size, True, timeout=timeout, wait_for_workers=False)
            port = store.port
        except Exception as e:  # noqa: BLE001 (reported on every rank below)
            why = f"rank 0 could not open torch's TCPStore on {addr}: {e}"
    port, why = mpi.bcast((port, why), root=0)
    if why is not None:
        raise RuntimeError(why)
    if mpi.rank != 0:
        store = dist.TCPStore(addr, port, mpi.size, False, timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=mpi.rank, world_size=mpi.size, timeout=timeout)


def make_model(width, layers):
    torch.manual_seed(0)
    mods = [nn.Linear(256, width), nn.ReLU()]
    for _ in range(layers):
        mods += [nn.Linear(width, width), nn.ReLU()]
    mods.append(nn.Linear(width, 10))
    return nn.Sequential(*mods)


def noop_hook(state, bucket):
    """DDP with a hook that communicates nothing: DDP's own cost (bucket copies, autograd hooks)."""
    del state
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def timed_hook(hook, spent):
    """`hook` with the time spent inside the call itself (on the backward thread) added to spent[0]."""

    def wrapper(state, bucket):
        t0 = time.perf_counter()
        try:
            return hook(state, bucket)
        finally:
            spent[0] += time.perf_counter() - t0

    return wrapper


def time_variant(name, base, hook, state, x, y, args, mpi, comm):
    if name == "compute":
        model = copy.deepcopy(base)  # no DDP, no communication: forward, backward, step
    else:
        # PowerSGD's hook issues its second and third allreduces from future callbacks; with several
        # buckets, gloo then sees them in a different order on different ranks (size mismatches,
        # aborts), so PowerSGD gets as few buckets as DDP allows: its fixed 1 MiB first one and the rest
        cap = 1 << 20 if name == "powersgd" else 25
        model = DDP(copy.deepcopy(base), bucket_cap_mb=cap, gradient_as_bucket_view=args.bucket_view)
    spent = [0.0]
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=args.momentum)
    if callable(state):  # a qccl HookState that needs the optimizer (codec+m)
        state = state(opt)
    algo = getattr(state, "algo", None)  # a qccl HookState's algorithm for compressed parts
    momentum = getattr(state, "momentum", None)  # its momentum-aware compression (optimizer=)
    if hook is not None:
        model.register_comm_hook(state, timed_hook(hook, spent))
    rows = []
    for step in range(args.warmup + args.steps):
        mpi.Barrier()  # steps start together, so one rank's lag is not charged to the next step
        s0, spent[0] = comm.stats(), 0.0
        c0 = time.process_time()
        t0 = time.perf_counter()
        # with --bucket-view DDP keeps every gradient in its bucket from step to step; the floor then
        # keeps its gradients too (zeroed in place) instead of allocating them again in backward
        opt.zero_grad(set_to_none=not (args.bucket_view and name == "compute"))
        loss = nn.functional.cross_entropy(model(x), y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        if args.clip > 0 and not getattr(state, "clip_grad_norm", None):
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        t3 = time.perf_counter()
        cpu = time.process_time() - c0
        s1 = comm.stats()
        if step >= args.warmup:
            rows.append([t3 - t0, t1 - t0, t2 - t1, t3 - t2, cpu, spent[0]] +
                        [s1[k] - s0[k] for k in ("encode_seconds", "decode_seconds", "wait_seconds")])
    # a step is as slow as its slowest rank; the phases are the medians over ranks and steps
    everyone = np.array(mpi.allgather(rows))  # ranks x steps x fields
    steps = np.max(everyone[:, :, 0], axis=0)
    phases = np.median(everyone.reshape(-1, everyone.shape[2]), axis=0)
    del model, opt
    out = {"variant": name, "median_s": float(np.median(steps)), "min_s": float(np.min(steps)), "steps": args.steps}
    if algo is not None:
        out["qccl_algo"] = algo
        # quantized calls below this many elements took allgather (HookState.small_call_numel)
        out["qccl_small_call_numel"] = getattr(state, "small_call_numel", 0)
    if momentum is not None:
        out["qccl_reconcile"] = momentum.reconcile
        out["qccl_reconciled_share"] = momentum.reconciled / max(1, momentum.exchanges)
        out["qccl_fused_share"] = momentum.fused / max(1, momentum.exchanges)
        # the parameters whose last average is held packed after the last step (momentum.py, pack)
        sents = [st.get("sent") for st in momentum._state.values()]
        out["qccl_packed_share"] = sum(isinstance(s, qccl._qccl._PackedSent) for s in sents) / max(1, len(sents))
        # the compressed calls' rotation blocks (HookState(rotation=...); 0: not rotated)
        out["qccl_rotation"] = sorted(b for plan in state._plans.values() for b in plan.rotation.values())
        # where rotation="auto" decided: the codec's error rotated / plain (below 0.9: rotated)
        out["qccl_rotation_share"] = sorted(round(v, 4) for plan in state._plans.values()
                                            for v in plan.rotation_share.values())
    if args.clip > 0:
        out["clip"] = "hook" if getattr(state, "clip_grad_norm", None) else "loop"
    for k, v in zip(PHASES, phases[1:]):
        out[k] = float(v)
    return out


PHASES = ("forward_s", "backward_s", "optimizer_s", "cpu_s", "hook_call_s", "encode_s", "decode_s", "wait_s")


def main():
    args = parse_args()
    mpi = MPI.COMM_WORLD
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // mpi.size))
    addr = args.master_addr
    if addr is None:
        ifname = os.environ.get("GLOO_SOCKET_IFNAME")
        addr = interface_address(ifname) if ifname else "127.0.0.1"
    init_gloo(mpi, mpi.bcast(addr, root=0))
    if args.transport == "mpi":
        comm = qccl.from_mpi(mpi)
    else:
        qport = mpi.bcast(free_port(addr) if mpi.rank == 0 else None, root=0)
        comm = qccl.init_rank(mpi.size, qccl.unique_id_from_address(addr, qport), mpi.rank)

    base = make_model(args.width, args.layers)
    params = sum(p.numel() for p in base.parameters())
    g = torch.Generator().manual_seed(mpi.rank)
    x = torch.randn(args.batch, 256, generator=g)
    y = torch.randint(0, 10, (args.batch,), generator=g)

    variants = []
    for b in filter(None, args.baselines.split(",")):
        if b not in ("compute", "noop", "fp32", "fp16", "powersgd"):
            raise SystemExit(f"unknown baseline {b!r}")
        if b == "powersgd":
            # start_powerSGD_iter must be > 1 with error feedback; step 2 on is compressed (warm-up >= 3)
            st = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=args.powersgd_rank,
                                             start_powerSGD_iter=2)
            variants.append((b, powerSGD_hook.powerSGD_hook, st))
            continue
        variants.append((b, {"fp16": fp16_compress_hook, "noop": noop_hook}.get(b), None))
    for spec in filter(None, args.codecs.split(",")):
        base_spec, _, algo = spec.partition("@")
        if algo and algo not in ("sra", "allgather"):
            raise SystemExit(f"--codecs {spec!r}: the algorithm after @ must be sra or allgather")
        algo = algo or args.algo
        base_spec, _, gain = base_spec.partition("/")
        gain = float(gain) if gain else None
        base_spec, _, rotation = base_spec.partition("%")
        rotation = rotation or args.rotation
        hook_clip = base_spec.endswith("+hc")
        if hook_clip and args.clip <= 0:
            raise SystemExit(f"--codecs {spec!r}: +hc needs --clip")
        base_spec = base_spec.removesuffix("+hc")
        clip = args.clip if hook_clip else None
        reconcile = {"+mu": False, "+mr": True}.get(base_spec[-3:], "auto")
        fuse = not base_spec.endswith("+ma")
        pack = {"+mn": False, "+mp": True}.get(base_spec[-3:])  # None: the hook's default
        aware = base_spec.endswith("+m") or reconcile != "auto" or not fuse or pack is not None
        codec, _, bits = (base_spec.removesuffix("+mu").removesuffix("+mr").removesuffix("+ma").removesuffix("+mn")
                          .removesuffix("+mp").removesuffix("+m")
                          .partition(":"))
        bits = int(bits) if bits else None
        if aware:
            def state(opt, codec=codec, bits=bits, algo=algo, reconcile=reconcile, clip=clip, fuse=fuse, pack=pack,
                      gain=gain, rotation=rotation):
                rot = {} if rotation is None else {"rotation": rotation if rotation == "auto" else int(rotation)}
                st = qtorch.HookState(comm, codec=codec, bits=bits, algo=algo, optimizer=opt, reconcile=reconcile,
                                      clip_grad_norm=clip, feedback_gain=gain, **rot)
                st.momentum.fuse = fuse
                if pack is not None:
                    st.momentum.pack = pack
                return st
        else:
            state = qtorch.HookState(comm, codec=codec, bits=bits, algo=algo, clip_grad_norm=clip, feedback_gain=gain)
        variants.append((f"qccl-{spec}", qtorch.allreduce_hook, state))

    results = []
    for name, hook, state in variants:
        s0 = comm.stats()
        r = time_variant(name, base, hook, state, x, y, args, mpi, comm)
        r["qccl_bytes_sent_per_step"] = (comm.stats()["bytes_sent"] - s0["bytes_sent"]) / (args.warmup + args.steps)
        results.append(r)
        if mpi.rank == 0:
            print(f"{name:16s} median step {1e3 * r['median_s']:9.1f} ms  (min {1e3 * r['min_s']:.1f})", flush=True)

    if mpi.rank == 0:
        base_best = min((r["median_s"] for r in results if r["variant"] in ("fp32", "fp16")), default=None)
        print(f"\n{mpi.size} ranks, {params / 1e6:.1f}M parameters ({4 * params / 2**20:.0f} MiB of fp32 gradients), "
              f"batch {args.batch} per rank, SGD momentum {args.momentum:g}, qccl over {args.transport}")
        floor = next((r["median_s"] for r in results if r["variant"] == "compute"), None)
        print(f"{'variant':16s} {'step ms':>9s} {'speedup':>8s} {'x floor':>8s} {'qccl MiB/step':>14s}   "
              "per rank, medians in ms: forward backward optimizer cpu hook_call encode decode wait")
        for r in results:
            comparable = base_best and r["variant"] not in ("compute", "noop")
            r["speedup_vs_best_baseline"] = base_best / r["median_s"] if comparable else None
            r["over_compute_floor"] = r["median_s"] / floor if floor else None
            sp = f"{r['speedup_vs_best_baseline']:.2f}x" if comparable else "-"
            fl = f"{r['over_compute_floor']:.2f}" if floor else "-"
            sent = f"{r['qccl_bytes_sent_per_step'] / 2**20:.2f}" if r["variant"].startswith("qccl") else "-"
            ph = " ".join(f"{1e3 * r[k]:7.1f}" for k in PHASES)
            print(f"{r['variant']:16s} {1e3 * r['median_s']:9.1f} {sp:>8s} {fl:>8s} {sent:>14s}   {ph}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"ranks": mpi.size, "parameters": params, "torch": torch.__version__, "args": vars(args),
                           "results": results}, f, indent=1)
    comm.destroy()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
