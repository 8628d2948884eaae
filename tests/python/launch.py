#!/usr/bin/env python3
"""Starts N local ranks with torchrun's environment and waits for all of them.

    launch.py --np 2 [--timeout 240] -- python -m pytest test_env.py

Each rank gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free
MASTER_PORT, as torchrun --standalone would set them. When one rank fails the others get a short
grace period and are then killed, so a lost peer never leaves the run hanging. The exit status is
the first non-zero status of any rank (or 124 on timeout).
"""

import argparse
import os
import random
import socket
import subprocess
import sys
import time


def ephemeral_low() -> int:
    """The lowest port of the kernel's ephemeral range (ip_local_port_range)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(span: int = 4) -> int:
    """A port p with p .. p + span - 1 all free: torch's store takes MASTER_PORT, qccl.from_env()
    MASTER_PORT + 1, and the tests bootstrap extra communicators on + 2 and + 3. The ranks bind
    them only later, so the ports come from below the kernel's ephemeral range, at random: every
    outgoing connection and every port-0 bind of another process (the tests running beside this
    one) draws from that range and could take a port probed free there before its rank binds it."""
    low, high = 10000, ephemeral_low() - span
    if high - low < 1000:  # no room below the ephemeral range: probe inside it
        low, high = high + span, 65536 - span
    rng = random.Random(os.getpid() ^ time.time_ns())
    for _ in range(200):
        port = rng.randrange(low, high)
        try:
            for k in range(span):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port + k))
            return port
        except OSError:
            continue
    raise RuntimeError(f"no {span} consecutive free ports on 127.0.0.1 in [{low}, {high + span})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--np", type=int, required=True, help="number of ranks")
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds before every rank is killed")
    ap.add_argument("--grace", type=float, default=30.0, help="seconds the others get after a rank fails")
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="-- command to run on every rank")
    args = ap.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if args.np < 1 or not cmd:
        ap.error("need --np >= 1 and a command after --")

    port = free_port()
    procs = []
    for rank in range(args.np):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(args.np),
                   LOCAL_WORLD_SIZE=str(args.np), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen(cmd, env=env))

    deadline = time.monotonic() + args.timeout
    status = 0
    while any(p.poll() is None for p in procs):
        failed = [p.returncode for p in procs if p.returncode not in (None, 0)]
        if failed and not status:
            status = failed[0]
            deadline = min(deadline, time.monotonic() + args.grace)
        if time.monotonic() > deadline:
            for p in procs:
                if p.poll() is None:
                    p.kill()
            status = status or 124
            print(f"launch.py: killed the remaining ranks after {'a failure' if status != 124 else 'the timeout'}",
                  file=sys.stderr)
            break
        time.sleep(0.1)
    for p in procs:
        p.wait()
        if p.returncode != 0 and not status:
            status = p.returncode if p.returncode > 0 else 1
    return status


if __name__ == "__main__":
    sys.exit(main())
