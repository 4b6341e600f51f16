#!/usr/bin/env bash
# gpu_check.sh: the GPU suite and the benchmarks on a fresh GPU machine, in one command.
#
#   bash benchmarks/gpu_check.sh              (from the root of a checkout)
#   OUT=/some/dir BUDGET=540 bash benchmarks/gpu_check.sh
#
# Steps, each with its own time limit (a step that fails or times out is reported and the next
# one runs; the whole run has a budget of BUDGET seconds, default 540):
#   1 env        nvidia-smi, torch/CUDA/cuDNN/NCCL versions, the GPUs, the dependencies
#   2 install    wheels in ./.whl first (a machine without network: `pip download -d .whl ...`
#                beforehand), then the project (pip install -e .[dev] when the package index
#                answers; else the checkout on PYTHONPATH)
#   3 gpu_suite  python -m pytest tests/gpu -m gpu (with 2+ GPUs it includes DDP and FSDP, a process per GPU)
#   4 nccl       with 2+ GPUs: benchmarks/ddp_overhead.py (DDP over NCCL, a GPU per process)
#                and benchmarks/fsdp_memory.py --nproc 2
#   5 models     benchmarks/models.py --rounds 1 --steps 10 (eager, then compiled with the time left)
#   6 overhead   benchmarks/overhead.py --quick
# Everything goes under $OUT (default ./gpu_check_out): one log per step and 00_summary.txt,
# which is also printed at the end. Without a usable GPU the run stops after step 2 with
# "no GPU" and exit status 3 (GPU_CHECK_FORCE=1 goes on, only to try the script on a CPU).
# GPU_CHECK_NO_PIP=1: never use pip's network (a machine known to be offline).
set -u
if [ ! -f pyproject.toml ] || ! grep -q 'name = "loopwright"' pyproject.toml; then
    echo "gpu_check.sh: run it from the root of a loopwright checkout (the folder with its pyproject.toml)" >&2
    exit 2
fi
OUT=${OUT:-$PWD/gpu_check_out}
BUDGET=${BUDGET:-540}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
START=$(date +%s)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=10
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # the checkout itself, whatever the install does
export PY WORK
SUMMARY="$OUT/00_summary.txt"
: > "$SUMMARY"

note() { echo "$*" | tee -a "$SUMMARY"; }
elapsed() { echo $(( $(date +%s) - START )); }

# step NAME LOG LIMIT MIN COMMAND...: COMMAND for at most LIMIT seconds (less when the budget is
# short), skipped when fewer than MIN seconds of the budget are left; output appended to LOG.
step() {
    local name=$1 log=$2 limit=$3 min=$4
    shift 4
    local left=$(( BUDGET - $(elapsed) ))
    if (( left < min )); then
        note "[$name] SKIPPED: ${left}s of the budget left, needs ${min}s"
        return 0
    fi
    (( limit > left )) && limit=$left
    local t0
    t0=$(date +%s)
    echo "== [$name] at $(elapsed)s, limit ${limit}s: $*" >> "$OUT/$log"
    timeout -k 10 "$limit" bash -c '"$@"' step "$@" >> "$OUT/$log" 2>&1
    local rc=$?
    local what="ok"
    (( rc != 0 )) && what="FAILED rc=$rc"
    (( rc == 124 || rc == 137 )) && what="TIMED OUT after ${limit}s"
    note "[$name] $what ($(( $(date +%s) - t0 ))s) -> $log"
    return 0
}

note "gpu_check.sh: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), budget ${BUDGET}s"

# ------------------------------------------------------------------------------ 1 env
env_step() {
    nvidia-smi || echo "nvidia-smi: not found or failed"
    nvidia-smi topo -m 2>/dev/null
    echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-<unset>}  python=$(command -v "$PY")"
    "$PY" - <<'PYEOF'
import importlib, platform
print("python", platform.python_version())
try:
    import torch
    print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(),
          "devices", torch.cuda.device_count())
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        print(f"  cuda:{i} {p.name} cc {p.major}.{p.minor} {p.total_memory / 2**30:.1f} GiB, {p.multi_processor_count} SMs")
    if torch.cuda.is_available():
        print("cudnn", torch.backends.cudnn.version(), "nccl", torch.cuda.nccl.version(), "bf16", torch.cuda.is_bf16_supported())
except Exception as error:  # noqa: BLE001
    print("torch import failed:", error)
for name in ("pydantic", "tqdm", "tensorboard", "yaml", "numpy", "pytest", "triton", "lightning"):
    try:
        print(f"  {name} {getattr(importlib.import_module(name), '__version__', '?')}")
    except Exception as error:  # noqa: BLE001
        print(f"  {name} MISSING ({type(error).__name__})")
PYEOF
}
export -f env_step
step env 01_env.log 60 5 env_step

# -------------------------------------------------------------------------- 2 install
install_step() {
    if ls .whl/*.whl >/dev/null 2>&1; then  # carried wheels: a machine without network
        "$PY" -m pip install -q --no-index --find-links .whl .whl/*.whl && echo "installed the wheels in ./.whl" \
            || echo "installing the wheels in ./.whl failed"
    fi
    local online=0
    if [ "${GPU_CHECK_NO_PIP:-0}" != 1 ] && timeout 25 "$PY" -m pip download -q --no-deps --no-cache-dir --retries 0 \
            --timeout 5 -d "$WORK/netcheck" pip >/dev/null 2>&1; then
        online=1
    fi
    echo "package index reachable: $online"
    if (( online )); then
        "$PY" -c "import torch; print('torch==' + torch.__version__)" > "$WORK/constraints.txt" 2>/dev/null || : > "$WORK/constraints.txt"
        timeout 240 "$PY" -m pip install -q -e ".[dev]" -c "$WORK/constraints.txt" \
            || echo "pip install -e .[dev] failed: the checkout stays on PYTHONPATH"
    fi
    "$PY" -c "import torch, pydantic, pytest, trainer, callbacks; print('imports ok: trainer from', trainer.__file__)"
}
export -f install_step
step install 02_install.log 300 20 install_step

NGPU=$("$PY" -c "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)" 2>/dev/null || echo 0)
if ! "$PY" -c "import trainer, callbacks, pytest" 2>>"$OUT/02_install.log"; then
    note "STOP: the project does not import (a dependency missing?): see 02_install.log"
    exit 1
fi
if (( NGPU == 0 )) && [ "${GPU_CHECK_FORCE:-0}" != 1 ]; then
    note "STOP: no GPU (torch.cuda.is_available() is False: no NVIDIA GPU, no driver, or a CPU build of torch; see 01_env.log)"
    note "total: $(elapsed)s"
    exit 3
fi
note "GPUs: $NGPU"

# ------------------------------------------------------------------------ 3 GPU suite
step gpu_suite 03_gpu_suite.log 300 60 "$PY" -m pytest tests/gpu -m gpu -q -rfEs -p no:cacheprovider --durations=8

# ------------------------------------------------------------------ 4 NCCL (2+ GPUs)
if (( NGPU >= 2 )) || [ "${GPU_CHECK_FORCE:-0}" = 1 ]; then
    step nccl_ddp 04_nccl.log 120 40 "$PY" benchmarks/ddp_overhead.py --steps 100 --rounds 2
    step nccl_fsdp 04_nccl.log 120 40 "$PY" benchmarks/fsdp_memory.py --nproc 2 --steps 3
else
    note "[nccl] SKIPPED: fewer than 2 GPUs"
fi

# ------------------------------------------------------------------------ 5, 6 benchmarks
step models 05_models.log 150 40 "$PY" benchmarks/models.py --rounds 1 --steps 10 --no-compile
step overhead 06_overhead.log 150 40 "$PY" benchmarks/overhead.py --quick
step models_compiled 07_models_compiled.log 300 90 "$PY" benchmarks/models.py --rounds 1 --steps 10

# ---------------------------------------------------------------------------- summary
{
    echo
    echo "== GPU suite (03_gpu_suite.log)"
    grep -E "^(FAILED|ERROR) |^SKIPPED |^=+ .*(passed|failed|error|skipped).* =+$|^[0-9]+ (passed|failed|skipped|error)" "$OUT/03_gpu_suite.log" 2>/dev/null | tail -30
    echo
    echo "== benchmarks (04-07)"
    grep -h -E "^\||median|ratio|peak" "$OUT"/04_nccl.log "$OUT"/05_models.log "$OUT"/06_overhead.log "$OUT"/07_models_compiled.log 2>/dev/null | head -60
    echo
    echo "total: $(elapsed)s of a ${BUDGET}s budget"
} | tee -a "$SUMMARY"
