#!/usr/bin/env bash
# The GPU measurements in one bounded call on a GPU machine with `gpu_bundle.py`'s folder: each part
# under its own time limit, in the order that matters most if the time runs out, its output under $OUT.
#
#   python benchmarks/gpu_bundle.py prepare --dir .gpu              # on a machine with a committed tree
#   OUT=... bash .gpu/src/benchmarks/gpu_session.sh [PART ...]      # on the GPU machine, the folder copied
#
# PARTs, run in the order given (default: machine ulps tier kit loss mfu):
#   machine  the GPU, driver, CUDA, cuDNN, framework versions             -> machine.txt
#   ulps     exp, log, sigmoid, tanh of torch (cuDNN's LSTM included) and JAX on the GPU, against
#            float64, in the error model's units (benchmarks/elementwise_ulps.py) -> ulps-$DEVICE.*
#   tier     `make test-gpu` with 8 workers                                -> tier.log, tier.xml
#   kit      `benchbase backend-test` on cuda, its numerical rules, for torch's three families and
#            JAX's DS2: how close each came to its bound, or by how much it failed -> kit-*.log
#   loss     the torch transducer loss at the full rnnt's shapes: its operators per step, and its
#            time eager and from CUDA graphs (benchmarks/rnnt_loss_operators.py) -> loss-$DEVICE.txt
#   mfu      `gpu_bundle.py run` of $MFU_RUNS, started until $MFU_DEADLINE s -> mfu/summary.md,
#            mfu-runs.tgz (config, result, metrics and any profile of every run); by default where
#            the bf16 steps' time goes (`:profile`), the full RNN-T in bf16 at MLPerf's per-GPU
#            batch (64 of 512 on 8 GPUs, profiled too), the Conformer's subsampling layout
#            (`:nchw` against the channels-last default), its largest batch that fits (`fit`,
#            from the peaks at 32 and 256), then the compile and unroll levers
# Limits (seconds): TIER_LIMIT (400), KIT_LIMIT (120 each), MFU_DEADLINE (300), and SESSION_LIMIT,
# which bounds the whole call, 570 s by default: each part's limit is cut to what is left of it, and
# a part with less than a minute left is skipped and says so, so that the call ends, with every
# file it wrote complete, within SESSION_LIMIT. Under the default, `machine ulps tier kit loss` fit
# in one call (about 5 minutes before the tier's 18 mixed-precision checks, which no GPU has timed
# yet) and `mfu` in a second. DEVICE=cpu runs the same parts on a CPU (the tier then skips): a smoke
# test of the script before it runs on a GPU.
set -u
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
: "${OUT:?set OUT to the folder whose files come back}"
DEVICE=${DEVICE:-cuda}
MFU_RUNS=${MFU_RUNS:-torch:conformer:bf16:32:profile,torch:ds2:bf16:150:profile,torch:conformer:bf16:32,torch:rnnt:bf16:64:profile,torch:rnnt:bf16:64:eager,torch:conformer:bf16:32:nchw,torch:conformer:bf16:256,torch:conformer:bf16:fit,torch:conformer:bf16:32:compile,jax:ds2:bf16:150:unroll8,jax:ds2:bf16:150,jax:rnnt:bf16:64,jax:rnnt:bf16:64:unroll8,torch:rnnt:tf32:64}
started=$SECONDS
stamp() { echo "[$((SECONDS - started)) s] $*"; }
# A part's limit: its own, or what is left of SESSION_LIMIT less 10 s to pack up, if that is less.
limit() {
    local left=$(( ${SESSION_LIMIT:-570} - (SECONDS - started) - 10 ))
    echo $(( $1 < left ? $1 : left ))
}

# shellcheck source=/dev/null
source "$BUNDLE/env.sh" || { echo "the bundle's env.sh failed"; exit 1; }
cd "$BUNDLE/src" || exit 1

machine() {
    { nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv
      nproc; python3 --version
      python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'
      python3 -c 'import jax; print("jax", jax.__version__, jax.devices())'
    } > "$OUT/machine.txt" 2>&1
    cat "$OUT/machine.txt"
}

ulps() {
    timeout "$(limit 120)" python3 benchmarks/elementwise_ulps.py --frameworks torch,jax --device "$DEVICE" \
        --out "$OUT/ulps-$DEVICE.json" > "$OUT/ulps-$DEVICE.md" 2>&1
    cat "$OUT/ulps-$DEVICE.md"
}

tier() {
    timeout "$(limit "${TIER_LIMIT:-400}")" make test-gpu GPU_PYTHON=python3 \
        GPU_TEST_ARGS="-n 8 -q -rfE --junitxml=$OUT/tier.xml" > "$OUT/tier.log" 2>&1
    echo "tier exit $?"; tail -n 25 "$OUT/tier.log"
}

kit() {
    for spec in torch:ds2 torch:rnnt torch:conformer jax:ds2; do
        backend=${spec%%:*} family=${spec##*:}
        if (( $(limit "${KIT_LIMIT:-120}") < 60 )); then echo "kit $spec skipped: under a minute left"; continue; fi
        timeout "$(limit "${KIT_LIMIT:-120}")" python3 -m benchbase backend-test "$backend" --family "$family" --device "$DEVICE" \
            --rule forward_parity --rule loss --rule prediction_matches_weights --json \
            > "$OUT/kit-$backend-$family.json" 2> "$OUT/kit-$backend-$family.err"
        echo "kit $spec exit $?"
        python3 -c 'import json, sys; [print(" ", r["rule"], "pass" if r["passed"] else "FAIL", r["message"])
                    for r in json.load(open(sys.argv[1]))["rules"]]' "$OUT/kit-$backend-$family.json" \
            || tail -n 3 "$OUT/kit-$backend-$family.err"
    done
}

loss() {
    timeout "$(limit 120)" python3 benchmarks/rnnt_loss_operators.py --device "$DEVICE" > "$OUT/loss-$DEVICE.txt" 2>&1
    echo "loss exit $?"; cat "$OUT/loss-$DEVICE.txt"
}

mfu() {
    python3 benchmarks/gpu_bundle.py run --dir "$BUNDLE" --out "$OUT/mfu" --epochs 5 --runs "$MFU_RUNS" \
        --deadline "$(limit "${MFU_DEADLINE:-300}")" --device "$DEVICE"
    tar -czf "$OUT/mfu-runs.tgz" --exclude='*.ckpt' --exclude='checkpoints' -C "$OUT" mfu
}

for part in "${@:-machine ulps tier kit loss mfu}"; do
    for name in $part; do
        case $name in
            machine|ulps|tier|kit|loss|mfu)
                if (( $(limit 60) < 60 )); then stamp "$name skipped: under a minute of SESSION_LIMIT left"; continue; fi
                stamp "$name"; "$name" ;;
            *) echo "unknown part '$name' (machine, ulps, tier, kit, loss, mfu)"; exit 2 ;;
        esac
    done
done
stamp "done"
