# dtr: top-level driver. `make demo` and `make test` work on a fresh Debian machine.
BUILD    ?= build
JOBS     ?= $(shell nproc)
DATA     ?= $(abspath ../shared/data/dtr-logs)
RESNET   := $(firstword $(wildcard $(DATA)/resnet32-*.log))
# Debian packages the build needs; `make deps` installs the missing ones.
APT_PKGS := cmake make g++ pkg-config catch2 nlohmann-json3-dev libcli11-dev libfmt-dev libbenchmark-dev libmimalloc-dev libtorch-dev python3-torch python3-torchvision libopenblas0-pthread python3-pytest python3-pytest-xdist python3-numpy coinor-libcbc-dev libxxhash-dev

.PHONY: all deps configure build test test-sanitize test-tsan demo bench eval eval-quick docs clean

all: build

deps:
	@missing=""; for p in $(APT_PKGS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi

$(BUILD)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDTR_DATA_DIR=$(DATA)

configure: $(BUILD)/CMakeCache.txt

build: deps configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	$(MAKE) --no-print-directory test-sanitize
	$(MAKE) --no-print-directory test-tsan

# ASan/UBSan build of the library tests (engine stress test at DTR_DEBUG=3 included).
test-sanitize: deps
	cmake -S . -B $(BUILD)-asan -DCMAKE_BUILD_TYPE=Debug -DDTR_SANITIZE=address,undefined -DDTR_DATA_DIR=$(DATA) >/dev/null
	cmake --build $(BUILD)-asan -j $(JOBS) --target dtr_tests
	cd $(BUILD)-asan && UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp ctest --output-on-failure -j $(JOBS) -L unit

# TSan build of the multi-threaded tests only (their ctest names start with "allocator threads").
test-tsan: deps
	cmake -S . -B $(BUILD)-tsan -DCMAKE_BUILD_TYPE=Debug -DDTR_SANITIZE=thread -DDTR_DATA_DIR=$(DATA) >/dev/null
	cmake --build $(BUILD)-tsan -j $(JOBS) --target dtr_tests
	cd $(BUILD)-tsan && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -j $(JOBS) -R "allocator threads"

demo: build
	@echo "== budget sweep of the ResNet-32 log (DTR artifact), every policy =="
	$(BUILD)/bin/dtr-sim sweep --trace $(RESNET) --policies dtr_eq,dtr,dtr_local,msps,lru,size,random,coop \
	  --budgets 0.1:0.9:0.1 --csv $(BUILD)/demo-sweep.csv --svg $(BUILD)/demo-sweep.svg
	@echo "wrote $(BUILD)/demo-sweep.csv and $(BUILD)/demo-sweep.svg"
	@echo "== an unmodified PyTorch training script (torchvision resnet18), without and under half its peak =="
	/usr/bin/python3 tools/torch_demo.py --fractions 0.5,0.6,0.7 --steps 4 --batch 32

bench: build
	$(BUILD)/bin/dtr-bench --benchmark_counters_tabular=true
	/usr/bin/python3 bench/torch_step_time.py --rounds 5

# DTR's headline figure on real models, live and simulated (tools/eval.py): docs/results.md,
# docs/results/results.csv and docs/results/overhead.svg, in about 20 minutes; eval-quick
# (2 models, 2 policies, 3 budgets, a few minutes) writes to build/eval-quick/ instead.
eval: build
	/usr/bin/python3 tools/eval.py

eval-quick: build
	/usr/bin/python3 tools/eval.py --quick

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-tsan
