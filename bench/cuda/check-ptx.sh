#!/usr/bin/env bash
# Checks the embedded PTX kernels offline with NVIDIA's assembler, ptxas: that they assemble
# for each GPU generation, their register use (no spills), and, with cuobjdump, that the
# timed loops hold the instructions the FLOPS arithmetic counts. Not run in CI: it needs
# the CUDA toolkit, which gpunex itself never needs.
#
# ptxas comes with the CUDA toolkit (Debian: nvidia-cuda-toolkit, in non-free, CUDA 11.8,
# targets up to sm_90; it pulls in several GB of packages). Its ptxas and cuobjdump run on
# their own, so this is enough, without installing the package:
#   add "contrib non-free non-free-firmware" to an apt sources entry, apt-get update, then
#   cd /tmp && apt-get download nvidia-cuda-toolkit && dpkg-deb -x nvidia-cuda-toolkit_*.deb cuda
#   PTXAS=/tmp/cuda/usr/bin/ptxas bench/cuda/check-ptx.sh
#
# Usage: bench/cuda/check-ptx.sh   (PTXAS and CUOBJDUMP override the tools' paths)
set -euo pipefail
dir=$(cd "$(dirname "$0")" && pwd)
ptxas=${PTXAS:-$(command -v ptxas || true)}
[ -n "$ptxas" ] && [ -x "$ptxas" ] || { echo "ptxas not found: install the CUDA toolkit or set PTXAS" >&2; exit 2; }
cuobjdump=${CUOBJDUMP:-$(dirname "$ptxas")/cuobjdump}
[ -x "$cuobjdump" ] || cuobjdump=$(command -v cuobjdump || true)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$ptxas" --version | tail -1
fail=0
check() { # module, GPU names...
  local ptx=$1; shift
  for gpu in "$@"; do
    if ! "$ptxas" --gpu-name "$gpu" --warning-as-error -v "$dir/$ptx" -o "$tmp/${ptx%.ptx}_$gpu.cubin" >"$tmp/log" 2>&1; then
      echo "FAIL $ptx for $gpu:"; cat "$tmp/log"; fail=1; continue
    fi
    if grep -Eq '(^|[^0-9])[1-9][0-9]* bytes (spill stores|spill loads|stack frame)' "$tmp/log"; then
      echo "FAIL $ptx for $gpu: register spills"; grep -i spill "$tmp/log"; fail=1
    fi
    echo "ok   $ptx for $gpu: $(grep -o "entry function '[a-z0-9_]*'\|Used [0-9]* registers" "$tmp/log" | paste -sd' ' | sed "s/entry function //g")"
  done
}
check fma.ptx sm_70 sm_75 sm_80 sm_86 sm_89 sm_90
check mma.ptx sm_80 sm_86 sm_89 sm_90
# The loops as the GPU runs them (sm_90): 128 FFMA, 128 HFMA2 and 8 HMMA per iteration
# (ptxas may unroll a loop; the counts per iteration are what matter).
if [ -n "$cuobjdump" ] && [ -x "$cuobjdump" ]; then
  "$cuobjdump" -sass "$tmp/fma_sm_90.cubin" >"$tmp/fma.sass"
  "$cuobjdump" -sass "$tmp/mma_sm_90.cubin" >"$tmp/mma.sass"
  echo "sm_90 SASS: $(grep -c ' FFMA ' "$tmp/fma.sass") FFMA and $(grep -c ' HFMA2 ' "$tmp/fma.sass") HFMA2 in fma.ptx (128 each in the loops, the rest set-up), $(grep -c ' HMMA.16816.F32 ' "$tmp/mma.sass") HMMA.16816.F32 in mma.ptx (8 per iteration, unrolled), $(grep -c 'LDG.E.128' "$tmp/fma.sass") LDG.E.128 and $(grep -c 'STG.E.128' "$tmp/fma.sass") STG.E.128 in copy_v4"
fi
exit $fail
