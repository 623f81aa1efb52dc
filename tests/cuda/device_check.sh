#!/bin/bash
# device_check.sh: every check that needs a GPU, as one call on a lent GPU machine
# (docs/cuda.md, "What was run on a GPU"). CI has no GPU and does not run it.
#
#   tests/cuda/device_check.sh prepare   # here: fills .gpu/ from a DTR_WITH_CUDA build/
#   tests/cuda/device_check.sh run       # there, with .gpu carried: tests, then the bench
#
# `prepare` builds what the GPU machine cannot (it has CUDA and PyTorch 2.x, but none of
# Debian's packages): a test binary of the [cuda] and [pluggable] Catch tests alone (the
# full dtr_tests needs CBC and BLAS, 60 MiB of libraries), libdtr_cuda.so, the floor
# allocator of bench/cuda_floor_allocator.cpp, and the libraries they need beside them.
# `run` writes its logs under $OUT when that is set.
set -euo pipefail
cd "$(dirname "$0")/../.."
mode=${1:-}
case "$mode" in
prepare)
  [ -f build/lib/libcuda_floor.so ] || { echo "device_check.sh: build/lib/libcuda_floor.so" \
    "is missing: build with DTR_WITH_CUDA=ON (make test does, where nvcc is)" >&2; exit 1; }
  cuda=${CUDA_HOME:-/usr/local/cuda}
  rm -rf .gpu && mkdir -p .gpu
  g++ -O2 -DNDEBUG -std=c++17 -DDTR_HAVE_CUDA -DDTR_SOURCE_DIR='"."' \
    -DDTR_TEST_DATA_DIR='"tests/data"' -DDTR_LOG_DIR='"."' -DDTR_SIM_BIN='"dtr-sim"' \
    -I. -Itests -Iinclude -isystem "$cuda/include" \
    tests/main.cpp tests/cuda/test_cuda_backend.cpp tests/cuda/test_pluggable_table.cpp \
    -o .gpu/dtr_cuda_tests -Wl,-rpath,'$ORIGIN' build/lib/libdtr_cuda.so \
    build/lib/libdtr_allocator.a build/lib/libdtr_core.a -lmimalloc \
    -L"$cuda/lib64" -lcudart -lpthread
  cp build/lib/libdtr_cuda.so build/lib/libcuda_floor.so .gpu/
  strip .gpu/dtr_cuda_tests .gpu/libdtr_cuda.so
  cp -L /lib/x86_64-linux-gnu/libmimalloc.so.2 "$cuda/lib64/libcudart.so.13" .gpu/
  du -sh .gpu
  ;;
run)
  set +e  # each check runs whatever the one before did; the last lines say which failed
  out=${OUT:-/tmp/device_check}
  mkdir -p "$out"
  nvidia-smi -L
  python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
  # The Catch binary finds libcudart beside it; Python processes use PyTorch's own
  # libcudart.so.13, which the loader reuses for libdtr_cuda.so by its soname.
  LD_LIBRARY_PATH=$PWD/.gpu .gpu/dtr_cuda_tests "[cuda],[pluggable]" 2>&1 \
    | tee "$out/catch.log" | tail -4
  catch=$?
  DTR_CUDA_LIBRARY=$PWD/.gpu/libdtr_cuda.so python3 -m pytest -q -p no:cacheprovider \
    tests/cuda/test_pluggable_torch.py 2>&1 | tee "$out/pytest.log" | tail -4
  pytest=$?
  PYTHONUNBUFFERED=1 python3 bench/cuda_step_time.py --rounds "${ROUNDS:-5}" \
    --steps "${STEPS:-30}" --library "dtr_malloc=$PWD/.gpu/libdtr_cuda.so" \
    --library "floor=$PWD/.gpu/libcuda_floor.so" 2>&1 | tee "$out/bench.log"
  bench=$?
  echo "exit status: catch $catch, pytest $pytest, bench $bench"
  [ "$catch$pytest$bench" = 000 ]
  ;;
*)
  echo "usage: tests/cuda/device_check.sh prepare|run" >&2
  exit 2
  ;;
esac
