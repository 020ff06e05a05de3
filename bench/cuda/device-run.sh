#!/usr/bin/env bash
# The device check of issue 4: runs the real-GPU benchmark kernels once on a machine with
# NVIDIA GPUs (an H100 or H200) and prints each GPU's figures against its datasheet, the
# targets (tensor FP16 70%, memory bandwidth 80% of the datasheet) and the delisting
# thresholds. Nothing here has run on a GPU yet: this script is how it first does.
#
#   bench/cuda/device-run.sh build   on a machine with Go (no GPU needed): builds bin/gpunex,
#                                    bin/bench.test and bin/sandbox.test (the packages' tests)
#   bench/cuda/device-run.sh run     on the GPU machine (no Go needed): runs them
#   bench/cuda/device-run.sh         both, on a GPU machine with Go
#
# Where the GPU machine has no Go, build here, carry bin/ there (about 55 MB) and run. The
# outputs go to $OUT when it is set (else a temporary folder): gpus.json, gpus.txt,
# bench.txt (the test's output, with the per-GPU tables), ptxas.txt (check-ptx.sh, where
# ptxas is there), env.txt. The whole run takes well under a minute per GPU; the test
# fails if one GPU's suite takes 2 minutes.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
mode=${1:-all}

build() {
  set -e
  go=${GO:-$(command -v go || .ci/ensure-go)}
  mkdir -p bin
  "$go" build -trimpath -ldflags '-s -w' -o bin/gpunex ./cmd/gpunex
  "$go" test -c -trimpath -ldflags '-s -w' -o bin/bench.test ./bench
  "$go" test -c -trimpath -ldflags '-s -w' -o bin/sandbox.test ./sandbox
  ls -l bin/gpunex bin/bench.test bin/sandbox.test
  set +e
}

run() {
  out=${OUT:-$(mktemp -d)}
  mkdir -p "$out"
  [ -x bin/gpunex ] && [ -x bin/bench.test ] || { echo "bin/gpunex or bin/bench.test missing: run '$0 build' first" >&2; exit 2; }
  {
    date -u; uname -a
    nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu --format=csv 2>&1
    ldconfig -p 2>/dev/null | grep -E 'libcuda\.so|libnvidia-ml\.so' || echo "ldconfig does not list libcuda/libnvidia-ml (LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-})"
    echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-}"
  } >"$out/env.txt" 2>&1
  cat "$out/env.txt"

  # The GPUs as the node sees them: a provider home whose GPU entries are made real (init
  # declares a simulated one), so that the probe is NVML.
  home=$(mktemp -d)
  bin/gpunex init --home "$home" --role provider >/dev/null 2>&1 || echo "gpunex init failed" >&2
  sed -i 's/^simulated = true/simulated = false/' "$home"/*.toml 2>/dev/null
  bin/gpunex gpus --json --home "$home" >"$out/gpus.json" 2>&1
  bin/gpunex gpus --home "$home" >"$out/gpus.txt" 2>&1
  echo "== gpunex gpus"; cat "$out/gpus.txt"

  # The offline PTX check, where the machine has ptxas (the CUDA toolkit).
  if command -v ptxas >/dev/null; then
    echo "== check-ptx.sh"; bench/cuda/check-ptx.sh 2>&1 | tee "$out/ptxas.txt"
  fi

  # The kernels on every GPU: the tables go to standard output, the details to the test log.
  echo "== benchmark suite"
  (cd bench && GPUNEX_CUDA_DEVICE=1 ../bin/bench.test -test.run '^TestCUDADevice$' -test.count=1 -test.v -test.timeout 20m) 2>&1 | tee "$out/bench.txt"
  status=${PIPESTATUS[0]}
  # The rest of the bench tests, now with a driver: the live NVML probe suite among them.
  echo "== bench tests"
  (cd bench && ../bin/bench.test -test.count=1 -test.timeout 10m) 2>&1 | tee -a "$out/bench.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  # A job sees exactly its GPU (nvidia-smi -L inside it), through the host's CDI spec when
  # there is one: needs root, containerd, runc and busybox-static.
  echo "== a job's view of the GPUs"
  if [ -x bin/sandbox.test ] && command -v containerd >/dev/null && command -v runc >/dev/null; then
    (cd sandbox && GPUNEX_REAL_GPU=1 ../bin/sandbox.test -test.run '^TestRealGPUJob$' -test.count=1 -test.v -test.timeout 5m) 2>&1 | tee "$out/job-gpus.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
  else
    echo "skipped: bin/sandbox.test, containerd or runc missing (apt-get install containerd runc busybox-static)" | tee "$out/job-gpus.txt"
  fi
  echo "outputs in $out"
  exit "$status"
}

case "$mode" in
  build) build ;;
  run) run ;;
  all) build && run ;;
  *) echo "usage: $0 [build|run]" >&2; exit 2 ;;
esac
