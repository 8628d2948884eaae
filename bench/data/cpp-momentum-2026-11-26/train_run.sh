# Sourced by the C++ example's data scripts (cpp-rotation, cpp-econtrol): run CONFIG SEED CODEC MODE
# [ARGS...] runs examples/cpp's qccl-train-mlp on 4 local ranks with ARGS into
# $out/CONFIG-CODEC-MODE-ALGO-seedSEED.txt (summarize.py's file names) and prints its loss line.
# Needs $build and $out. ALGO is $algo (default: "default", the example's choice), passed as --algo
# otherwise; maxmin runs with --bits 4. $mpi is the launcher, for runs of another shape.
mpi=(mpirun --allow-run-as-root --oversubscribe --mca mpi_yield_when_idle 1 -np 4)
algo=${algo:-default}
run() {  # config seed codec mode args...
  local cfg=$1 seed=$2 codec=$3 mode=$4
  shift 4
  local f="$out/$cfg-$codec-$mode-$algo-seed$seed.txt" label=$mode
  local extra=()
  [ "$codec" = maxmin ] && extra+=(--bits 4)
  [ "$algo" != default ] && extra+=(--algo "$algo") && label="$mode $algo"
  "${mpi[@]}" "$build/examples/cpp/qccl-train-mlp" --codec "$codec" "${extra[@]}" --seed "$seed" --print-every 50 \
    "$@" > "$f"
  echo "$cfg seed $seed $codec $label: $(grep '^# loss' "$f")"
}
