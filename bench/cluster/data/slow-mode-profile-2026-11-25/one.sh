#!/usr/bin/env bash
# usage: one.sh RATE TAG
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../.." || exit 1
export QCCL_CLUSTER_PREFIX=q13 QCCL_CLUSTER_NET=10.199.113
rate=$1; tag=$2; D=$here/$tag; mkdir -p $D
bench/cluster/up 4 $rate >/dev/null 2>&1 || { echo upfail; exit 1; }
for i in 0 1 2 3; do ip netns exec q13-h$i nstat -n >/dev/null; done
/usr/bin/time -v timeout 600 bench/cluster/launch -n 4 -- build-release/bench/qccl-bench allreduce --codec onebit -b 64M -e 64M -n 10 -w 2 -c 1 --json --baselines mpi > $D/out.jsonl 2> $D/err.txt
for i in 0 1 2 3; do echo "== h$i"; ip netns exec q13-h$i nstat -a 2>/dev/null | grep -E 'Retrans|TCPLost|TCPTimeouts|TCPLossProbes|TCPSackRecovery|TcpOutSegs|TCPFastRetrans|TCPSpuriousRTOs|TCPOFOQueue|TCPRcvQDrop|TCPBacklog' ; ip netns exec q13-h$i tc -s qdisc show dev eth0 | grep -E 'Sent|dropped'; done > $D/net.txt
for i in 0 1 2 3; do echo "== veth$i"; ip netns exec q13-br tc -s qdisc show dev veth$i | grep -E 'Sent|dropped'; done >> $D/net.txt
bench/cluster/down >/dev/null 2>&1
