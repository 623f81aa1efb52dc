#!/bin/bash
# torch2_check.sh: libdtr_torch.so built against a later PyTorch than Debian's 1.13, and
# tests/torch run under it (docs/pytorch.md, "Under PyTorch 2.x"). CI has only Debian's
# 1.13 and does not run it; it is for a machine that has a PyTorch 2.x (a lent GPU
# machine has 2.11), in one call.
#
#   tests/torch/torch2_check.sh prepare          # here: fills .torch2/ from build/
#   tests/torch/torch2_check.sh build            # there: builds .torch2/lib/libdtr_torch.so
#   tests/torch/torch2_check.sh run [pytest args] # there: builds, then runs tests/torch
#
# `prepare` gathers what the other machine lacks: the static dtr libraries the torch
# library links (without debug sections), dtr-run and dtr-sim, libdtr_preload.so (no torch
# in either), libmimalloc, and the headers Debian gives here (nlohmann, mimalloc.h,
# xxhash.h). `run` compiles integration/torch's translation units against that machine's
# torch headers, with the flags of integration/torch/CMakeLists.txt, links them as
# CMake does, and runs pytest with that Python (DTR_PYTHON, default python3). dtr-plan
# needs CBC, which is not carried: test_plan.py skips. `run` writes its logs under $OUT
# when that is set.
set -euo pipefail
cd "$(dirname "$0")/../.."
mode=${1:-}
case "$mode" in
prepare)
  for f in build/lib/libdtr_preload.so build/bin/dtr-run build/bin/dtr-sim; do
    [ -f "$f" ] || { echo "torch2_check.sh: $f is missing: build first (make test does)" >&2; exit 1; }
  done
  rm -rf .torch2 && mkdir -p .torch2/lib .torch2/bin .torch2/static .torch2/include
  for l in planner eviction allocator core; do
    strip --strip-debug -o ".torch2/static/libdtr_$l.a" "build/lib/libdtr_$l.a"
  done
  strip -o .torch2/bin/dtr-run build/bin/dtr-run
  strip -o .torch2/bin/dtr-sim build/bin/dtr-sim
  cp build/lib/libdtr_preload.so .torch2/lib/
  cp -L /lib/x86_64-linux-gnu/libmimalloc.so.2 .torch2/lib/
  cp -r /usr/include/nlohmann /usr/include/mimalloc.h /usr/include/xxhash.h .torch2/include/
  du -sh .torch2
  ;;
build | run)
  shift
  out=${OUT:-/tmp/torch2_check}
  mkdir -p "$out" .torch2/obj
  py=${DTR_PYTHON:-python3}
  torch_dir=$($py -c 'import os, torch; print(os.path.dirname(torch.__file__))')
  abi=$($py -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
  $py -c 'import torch; print("torch", torch.__version__)'
  flags=(-O2 -g0 -DNDEBUG -fPIC -std=c++17 -fvisibility=hidden -fvisibility-inlines-hidden
    -Wall -Wextra -Wno-unused-parameter -D_GLIBCXX_USE_CXX11_ABI="$abi" -I. -Iinclude
    -isystem .torch2/include -isystem "$torch_dir/include"
    -isystem "$torch_dir/include/torch/csrc/api/include")
  units=(collector compat cpu_allocator dispatch_hook lineage process_kind recording runtime)
  pids=()
  for u in "${units[@]}"; do
    g++ "${flags[@]}" -c "integration/torch/$u.cpp" -o ".torch2/obj/$u.o" \
      2> ".torch2/obj/$u.log" &
    pids+=($!)
  done
  failed=0
  for i in "${!pids[@]}"; do
    if ! wait "${pids[$i]}"; then failed=1; echo "== ${units[$i]}.cpp"; head -40 ".torch2/obj/${units[$i]}.log"; fi
  done
  cat .torch2/obj/*.log > "$out/compile.log"
  [ "$failed" = 0 ] || { echo "torch2_check.sh: compiling failed" >&2; exit 1; }
  # Note [mimalloc stays private] (integration/torch/CMakeLists.txt): libstdc++ and libc
  # first among the DT_NEEDED entries.
  g++ -shared -o .torch2/lib/libdtr_torch.so .torch2/obj/*.o -lstdc++ -lc \
    .torch2/static/libdtr_planner.a .torch2/static/libdtr_eviction.a \
    .torch2/static/libdtr_allocator.a .torch2/static/libdtr_core.a \
    -L"$torch_dir/lib" -ltorch -ltorch_cpu -lc10 .torch2/lib/libmimalloc.so.2 -ldl \
    -Wl,-rpath,"$torch_dir/lib" -Wl,-rpath,'$ORIGIN' \
    -Wl,--exclude-libs,ALL -Wl,--no-undefined
  echo "built .torch2/lib/libdtr_torch.so"
  [ "$mode" = run ] || exit 0
  set +e
  LD_LIBRARY_PATH=$PWD/.torch2/lib DTR_PYTHON=$(command -v "$py") \
    DTR_LIBRARY=$PWD/.torch2/lib/libdtr_torch.so DTR_RUN=$PWD/.torch2/bin/dtr-run \
    DTR_SIM=$PWD/.torch2/bin/dtr-sim DTR_PLAN_TOOL=$PWD/.torch2/bin/none \
    PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 \
    $py -m pytest -q -rs -p no:cacheprovider "$@" tests/torch 2>&1 | tee "$out/pytest.log"
  status=${PIPESTATUS[0]}
  echo "exit status: pytest $status"
  exit "$status"
  ;;
*)
  echo "usage: tests/torch/torch2_check.sh prepare|build|run [pytest args]" >&2
  exit 2
  ;;
esac
