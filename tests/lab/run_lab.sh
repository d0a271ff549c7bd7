#!/usr/bin/env bash
# Record the fault-lab logs under tests/data/logs/lab/<scenario>/.
# Usage (from anywhere):  tests/lab/run_lab.sh [scenario ...]     (default: all scenarios)
# Needs a virtualenv with torch (CPU wheel is enough): LAB_VENV, default /tmp/labvenv.
# Every command is printed before it runs; see tests/lab/README.md.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
VENV=${LAB_VENV:-/tmp/labvenv}
export PATH="$VENV/bin:$PATH"
OUT=tests/data/logs/lab
TMPL=$(mktemp -d /tmp/lab_torchrun_logs.XXXXXX)
TR="torchrun --standalone --nproc-per-node 4 --tee 3"

run() {  # run <outfile> <command...>: stdout+stderr to <outfile>, exit code appended to a side list
    local out=$1; shift
    mkdir -p "$(dirname "$out")"
    echo "+ $* > $out 2>&1"
    timeout 120 "$@" > "$out" 2>&1
    local rc=$?
    echo "  exit code $rc"
    echo "$(basename "$out") $rc" >> "$(dirname "$out")/exit_codes.txt"
}

keep_log_dir() {  # keep_log_dir <scenario>: copy torchrun's --log-dir tree next to the combined log
    rm -rf "$OUT/$1/torchrun_log_dir"
    cp -r "$TMPL/$1" "$OUT/$1/torchrun_log_dir"
}

scenario() {
    local s=$1
    rm -rf "${OUT:?}/$s"; mkdir -p "$OUT/$s"
    case $s in
    gloo_timeout_rank3_absent)
        run "$OUT/$s/combined.log" env LAB_TIMEOUT_S=10 \
            $TR --log-dir "$TMPL/$s" tests/lab/$s.py
        keep_log_dir "$s" ;;
    rank_conditional_allgather)
        run "$OUT/$s/combined.log" env LAB_TIMEOUT_S=10 LAB_RANK_LOG_DIR="$OUT/$s" \
            $TR tests/lab/$s.py ;;
    mismatch_detail)
        run "$OUT/$s/detail_shape.log" env TORCH_DISTRIBUTED_DEBUG=DETAIL LAB_MISMATCH=shape \
            $TR tests/lab/$s.py
        run "$OUT/$s/detail_op.log" env TORCH_DISTRIBUTED_DEBUG=DETAIL LAB_MISMATCH=op \
            $TR tests/lab/$s.py
        run "$OUT/$s/nodebug_shape.log" env LAB_MISMATCH=shape \
            $TR tests/lab/$s.py ;;
    monitored_barrier|store_timeout)
        run "$OUT/$s/combined.log" env LAB_TIMEOUT_S=10 $TR tests/lab/$s.py ;;
    rank_killed)
        # peers reach the next all-reduce before torchrun's monitor notices: "Connection closed by peer"
        run "$OUT/$s/combined.log" env LAB_TIMEOUT_S=10 LAB_FAULT_STEP=4 LAB_KILL_AT=end \
            $TR --monitor-interval 5 --log-dir "$TMPL/$s" tests/lab/$s.py
        keep_log_dir "$s"
        # killed at the start of a step, peers already sent it data: "Connection reset by peer"
        run "$OUT/$s/combined_reset.log" env LAB_TIMEOUT_S=10 LAB_FAULT_STEP=4 LAB_KILL_AT=start \
            $TR tests/lab/$s.py
        # killed while peers are idle, default monitor interval: torchrun SIGTERMs the peers first
        run "$OUT/$s/combined_agent_first.log" env LAB_TIMEOUT_S=10 LAB_FAULT_STEP=4 LAB_KILL_AT=end \
            $TR tests/lab/$s.py ;;
    nan_loss)
        run "$OUT/$s/lr_too_high.log" env LAB_NAN_MODE=lr LAB_LR=0.5 python tests/lab/$s.py
        run "$OUT/$s/detect_anomaly.log" env LAB_NAN_MODE=anomaly python tests/lab/$s.py ;;
    dataloader_worker_killed)
        run "$OUT/$s/killed_by_main.log" env LAB_KILL=main python tests/lab/$s.py
        run "$OUT/$s/self_kill.log" env LAB_KILL=self python tests/lab/$s.py ;;
    dataloader_too_many_files)
        run "$OUT/$s/leak_workers0.log" env LAB_FD_MODE=leak LAB_WORKERS=0 python tests/lab/$s.py
        run "$OUT/$s/leak_workers2.log" env LAB_FD_MODE=leak LAB_WORKERS=2 python tests/lab/$s.py
        run "$OUT/$s/leak_workers2_file_system.log" env LAB_FD_MODE=leak LAB_WORKERS=2 \
            LAB_SHARING_STRATEGY=file_system python tests/lab/$s.py
        run "$OUT/$s/sharing_file_descriptor.log" env LAB_FD_MODE=sharing python tests/lab/$s.py ;;
    compile_graph_breaks)
        run "$OUT/$s/combined.log" env TORCH_LOGS=graph_breaks,recompiles LAB_RECOMPILE_LIMIT=2 \
            python tests/lab/$s.py ;;
    hang_evidence)
        # The rank_conditional_allgather hang, caught while it hangs: flight-recorder dumps (pickle + JSON),
        # faulthandler stacks (SIGUSR1) and py-spy dumps (text, --json, --native) of every worker.
        local fr=tests/data/flight_recorder/rank_conditional_allgather st=tests/data/stacks/rank_conditional_allgather
        rm -rf "$fr" "$st"; mkdir -p "$fr" "$st/pyspy_text" "$st/pyspy_json" "$st/pyspy_native" "$st/mixed"
        echo "+ LAB_TIMEOUT_S=60 LAB_FR_DIR=$fr LAB_FAULTHANDLER_DIR=$st/faulthandler $TR tests/lab/rank_conditional_allgather.py &"
        env LAB_TIMEOUT_S=60 LAB_FR_DIR="$fr" LAB_FAULTHANDLER_DIR="$st/faulthandler" LAB_RANK_LOG_DIR="$OUT/$s" \
            $TR tests/lab/rank_conditional_allgather.py > "$OUT/$s/combined.log" 2>&1 &
        local launcher=$!
        for _ in $(seq 1 600); do [ -f "$fr/json/rank_3.json" ] && [ -f "$fr/json/rank_0.json" ] && break; sleep 0.2; done
        sleep 1
        for pid in $(pgrep -f "python3 -u tests/lab/rank_conditional_allgather.py"); do
            r=$(tr '\0' '\n' < /proc/$pid/environ | sed -n 's/^RANK=//p')
            py-spy dump --pid "$pid" > "$st/pyspy_text/rank$r.txt"
            py-spy dump --json --pid "$pid" > "$st/pyspy_json/rank$r.json"
            py-spy dump --native --pid "$pid" > "$st/pyspy_native/rank$r.txt"
            kill -USR1 "$pid"
        done
        sleep 1
        pkill -9 -f "tests/lab/rank_conditional_allgather.py"; wait "$launcher"
        cp "$st/pyspy_text/rank0.txt" "$st/mixed/pyspy_rank0.txt"
        cp "$st/pyspy_json/rank1.json" "$st/mixed/pyspy_json_rank1.json"
        cp "$st/faulthandler/rank_2.txt" "$st/mixed/faulthandler_rank2.txt"
        cp "$st/pyspy_native/rank3.txt" "$st/mixed/pyspy_native_rank3.txt" ;;
    straggler_steps)
        run "$OUT/$s/combined.log" env LAB_SLOW_RANK=2 LAB_EXTRA_MS=30 LAB_STEPS=30 LAB_RANK_LOG_DIR="$OUT/$s" \
            $TR tests/lab/$s.py ;;
    *) echo "unknown scenario $s" >&2; return 2 ;;
    esac
}

ALL="gloo_timeout_rank3_absent rank_conditional_allgather mismatch_detail monitored_barrier store_timeout
rank_killed nan_loss dataloader_worker_killed dataloader_too_many_files compile_graph_breaks straggler_steps
hang_evidence"
for s in ${*:-$ALL}; do
    echo "== $s"
    start=$(date +%s)
    scenario "$s"
    echo "  took $(( $(date +%s) - start )) s"
done
rm -rf "$TMPL"
