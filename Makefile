# cellvm - top-level Makefile.  `make`, `make test`, `make check`, `make fuzz`,
# `make bench`, `make run`, `make serve`, `make install`, `make clean`.

SHELL := /bin/bash
PREFIX ?= /usr/local
DESTDIR ?=
OPTIMIZATION ?= -O2
SANITIZER ?=
FUZZ_TIME ?= 60
PYTHON := /usr/bin/python3
PYTEST_ARGS ?= --durations=25
# Integration tests side by side (pytest-xdist), JOBS at a time; 0 runs them in this process.
# Most of a test's time is spent waiting on a guest, so two at a time on two cores takes about
# half as long (docs/testing.md).
JOBS ?= 2

ifeq ($(SANITIZER),)
  B ?= build
  SANFLAGS :=
else
  B ?= build/san
  SANFLAGS := -fsanitize=$(SANITIZER) -fno-omit-frame-pointer -fno-sanitize-recover=all
endif

# Debian's libpython3.11, never the pyenv one first on PATH.
SYSPC := PKG_CONFIG_PATH=/usr/lib/x86_64-linux-gnu/pkgconfig:/usr/share/pkgconfig pkg-config
PY_CFLAGS = $(shell $(SYSPC) --cflags python3-embed 2>/dev/null)
PY_LIBS = $(shell $(SYSPC) --libs python3-embed 2>/dev/null)
GW_LIBS = $(shell $(SYSPC) --libs libczmq libzmq libcrypto 2>/dev/null)

WARN := -std=c11 -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2
ifeq ($(CI),true)
  WARN += -Werror
endif
CFLAGS ?= $(OPTIMIZATION) -g
ALL_CFLAGS = $(WARN) $(CFLAGS) $(SANFLAGS) -D_GNU_SOURCE -MMD -MP -Ichannel -Ikernel -Igateway -Iguest-image/init
LDFLAGS += $(SANFLAGS) -pthread

# The channel library (channel/, ch_ prefix) is linked by all three programs.
CH_SRC := $(wildcard channel/ch_*.c)
KN_SRC := $(filter-out kernel/main.c,$(wildcard kernel/kn_*.c)) $(CH_SRC)
GW_SRC := $(wildcard gateway/*/gw_*.c) $(CH_SRC)
GI_SRC := $(filter-out guest-image/init/gi_main.c,$(wildcard guest-image/init/gi_*.c)) $(CH_SRC)
CH_OBJ := $(CH_SRC:%.c=$(B)/obj/%.o)
KN_OBJ := $(KN_SRC:%.c=$(B)/obj/%.o)
GW_OBJ := $(GW_SRC:%.c=$(B)/obj/%.o)
GI_OBJ := $(GI_SRC:%.c=$(B)/obj/%.o)
CH_TESTS := $(patsubst tests/unit/%.c,$(B)/tests/%,$(wildcard tests/unit/test_ch_*.c))
KN_TESTS := $(patsubst tests/unit/%.c,$(B)/tests/%,$(wildcard tests/unit/test_kn_*.c))
GW_TESTS := $(patsubst tests/unit/%.c,$(B)/tests/%,$(wildcard tests/unit/test_gw_*.c))
GI_TESTS := $(patsubst tests/unit/%.c,$(B)/tests/%,$(wildcard tests/unit/test_gi_*.c))
KERNELSPECS := $(B)/share/jupyter/kernels/cellvm/kernel.json \
               $(B)/share/jupyter/kernels/cellvm-agent/kernel.json \
               $(B)/share/jupyter/kernels/cellvm-5.5/kernel.json \
               $(B)/share/jupyter/kernels/cellvm-notebook/kernel.json \
               $(B)/share/jupyter/kernels/cellvm-unsafe-local/kernel.json \
               $(B)/share/jupyter/kernels/cellvm-slurm/kernel.json \
               $(B)/share/jupyter/kernels/cellvm-remote/kernel.json

DEPS_STAMP := build/.deps-ok

.PHONY: sizes all deps kernel gateway init test test-fast test-fresh scripts-test unit integration layers contracts check fuzz bench run serve install clean kernelspecs image template oci-image
all: $(DEPS_STAMP) kernel gateway init kernelspecs $(B)/cellvm

$(DEPS_STAMP): scripts/deps.sh
	@mkdir -p build
	bash scripts/deps.sh
	@touch $@
deps:
	bash scripts/deps.sh

kernel: $(B)/cellvm-kernel
gateway: $(B)/cellvm-gateway $(B)/cellvm-launch $(B)/cellvm-remote $(B)/cellvm-jailshim.so
init: $(B)/cellvm-init
kernelspecs: $(KERNELSPECS)

$(B)/obj/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(PY_CFLAGS) -c $< -o $@

# The Python half of the kernel is embedded into the binary (see kn_pysrc.c).
$(B)/obj/kernel/kn_pysrc.o: kernel/kn_pysrc.c $(wildcard kernel/py/*.py)

$(B)/cellvm-kernel: $(B)/obj/kernel/main.o $(KN_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(PY_LIBS) -ljansson -lcrypto

$(B)/cellvm-gateway: $(B)/obj/gateway/programs/main.o $(GW_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(GW_LIBS) -ljansson

# The host-side CLI (cellvm ls/rm/snapshot): gateway/programs/cellvm.c.
$(B)/cellvm: $(B)/obj/gateway/programs/cellvm.o $(GW_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(GW_LIBS) -ljansson

# Preloaded into a jailed QEMU (gw_jail, docs/security.md): never linked into the gateway,
# and never sanitized (QEMU is not).
$(B)/cellvm-jailshim.so: gateway/programs/jailshim.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -D_GNU_SOURCE -shared -fPIC -o $@ $< -ldl

# The guest's PID 1 (docs/init.md); the image takes it from build/.
$(B)/cellvm-init: $(B)/obj/guest-image/init/gi_main.o $(GI_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ -ljansson -lcrypto -lm

# Small on purpose (no libzmq): it listens before the gateway loads (gw_listen.h).
$(B)/cellvm-launch: $(B)/obj/gateway/programs/launch.o $(B)/obj/gateway/wire/gw_conn.o \
                    $(B)/obj/gateway/wire/gw_hmac.o $(B)/obj/gateway/wire/gw_listen.o
	$(CC) $(LDFLAGS) -o $@ $^ -ljansson -lcrypto

# The launcher Enterprise Gateway and Gateway Provisioners start on a node (docs/cluster.md).
$(B)/cellvm-remote: $(B)/obj/gateway/programs/remote.o $(GW_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(GW_LIBS) -ljansson

# Every unit test links the shared test helpers (tests/unit/tu.h); the
# gateway tests also link TU_GW_OBJ: the helpers that need its types
# (tu_gw.h), the microvm backend's mock VMs and drivers (tu_microvm.h) and
# the snapshot tests' migration streams (tu_migstream.h).
TU_OBJ := $(B)/obj/tests/unit/tu.o
TU_GW_OBJ := $(B)/obj/tests/unit/tu_gw.o $(B)/obj/tests/unit/tu_microvm.o $(B)/obj/tests/unit/tu_session.o \
             $(B)/obj/tests/unit/tu_migstream.o
# Built through a pattern rule, so make would delete them as intermediates.
.SECONDARY: $(TU_OBJ) $(TU_GW_OBJ)
$(B)/tests/test_ch_%: tests/unit/test_ch_%.c $(CH_OBJ) $(TU_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $(filter %.c %.o,$^) -ljansson -lcrypto -lcmocka

$(B)/tests/test_gi_%: tests/unit/test_gi_%.c $(GI_OBJ) $(TU_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $(filter %.c %.o,$^) -ljansson -lcrypto -lm -lcmocka

$(B)/tests/test_kn_%: tests/unit/test_kn_%.c $(KN_OBJ) $(TU_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(PY_CFLAGS) $(LDFLAGS) -o $@ $(filter %.c %.o,$^) $(PY_LIBS) -ljansson -lcrypto -lcmocka

# A gateway test that starts a clone finds the shim beside itself, as the gateway does.
$(B)/tests/cellvm-jailshim.so: $(B)/cellvm-jailshim.so
	@mkdir -p $(dir $@)
	cp $< $@

$(B)/tests/test_gw_%: tests/unit/test_gw_%.c $(GW_OBJ) $(TU_OBJ) $(TU_GW_OBJ) | $(B)/tests/cellvm-jailshim.so
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $(filter %.c %.o,$^) $(GW_LIBS) -ljansson -lcrypto -lcmocka

$(B)/share/jupyter/kernels/%/kernel.json: scripts/kernelspec.sh Makefile | $(B)/cellvm-gateway $(B)/cellvm-launch $(B)/cellvm-remote
	CELLVM_IMAGE_DIR=$(abspath build/image) bash scripts/kernelspec.sh $* $(abspath $(B)) $@

# The helpers' own test (test_tu_skip: tu_skip fails under CI=true) runs first.
TU_TESTS := $(patsubst tests/unit/%.c,$(B)/tests/%,$(wildcard tests/unit/test_tu_*.c))
$(B)/tests/test_tu_%: tests/unit/test_tu_%.c $(TU_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $(filter %.c %.o,$^) -lcmocka

unit: $(TU_TESTS) $(CH_TESTS) $(KN_TESTS) $(GW_TESTS) $(GI_TESTS)
	@set -e; for t in $^; do echo "== $$t"; $$t; done

# Guest image (docs/guest-image.md): cached outside the tree, ~1 s when nothing changed.
# Always built from the non-sanitizer kernel, because the guest has no libasan.
# With no sanitizer, the programs are this make's own targets too: the sub-make must find them
# built, not link them a second time beside `all` under -j (a busy text file, a half-written one).
image: $(if $(SANITIZER),,$(B)/cellvm-kernel $(B)/cellvm-init)
	$(MAKE) --no-print-directory SANITIZER= B=build kernel init
	bash guest-image/build.sh build/cellvm-kernel build/cellvm-init build/image

# The snapshot template the default microvm kernelspecs restore from
# (docs/snapshots.md): built once per image/QEMU/memory, ~45 s; seconds when intact.
template: image $(if $(SANITIZER),,$(B)/cellvm-gateway)
	$(MAKE) --no-print-directory SANITIZER= B=build gateway
	@# exit 3: another process is building the same template; wait for it.
	@for i in $$(seq 1 120); do build/cellvm-gateway --build-template --image build/image; \
	  rc=$$?; [ $$rc -eq 3 ] || exit $$rc; sleep 2; done; exit 1
	@# Again now that the image's packages.json exists (metadata.debugger reads it): a
	@# published file keeps its cache mtime, so make's dates cannot tell.
	@for k in $(patsubst $(B)/share/jupyter/kernels/%/kernel.json,%,$(KERNELSPECS)); do \
	  CELLVM_IMAGE_DIR=$(abspath build/image) bash scripts/kernelspec.sh $$k $(abspath $(B)) \
	    $(B)/share/jupyter/kernels/$$k/kernel.json || exit 1; done

# The node's OCI image (docs/cluster.md, "The node image"): buildah from scratch, offline, from
# this build tree and this host's QEMU; a layer is rebuilt only when its inputs changed (about
# 1 s when only the programs did).
oci-image: image $(if $(SANITIZER),,$(B)/cellvm-gateway)
	$(MAKE) --no-print-directory SANITIZER= B=build gateway
	bash scripts/oci-image.sh build

# --dist loadgroup: a module marked xdist_group (one scenario, its steps in order over one
# session) runs whole on one worker; every other test goes wherever a worker is free.
INTEGRATION = CELLVM_BUILD=$(abspath $(B)) CELLVM_IMAGE=$(abspath build/image) \
  $(PYTHON) -m pytest -q -n $(JOBS) $(if $(filter 0,$(JOBS)),,--dist loadgroup) tests/integration
integration: all template $(B)/tests/test_gw_vm_boot
	$(INTEGRATION) $(PYTEST_ARGS)

# The gateway's layers (gateway/LAYERS, docs/gateway.md): no include and no call against their
# order, read from the sources and from nm of the objects; then the check's own test.
GW_PROG_OBJ := $(patsubst %.c,$(B)/obj/%.o,$(wildcard gateway/programs/*.c))
layers: $(GW_OBJ) $(GW_PROG_OBJ)
	$(PYTHON) scripts/layers.py --objs $(B)/obj/gateway
	LAYERS_OBJS=$(abspath $(B))/obj/gateway $(PYTHON) -m pytest -q -p no:cacheprovider \
	  tests/scripts/test_layers.py

# What headers promise (scripts/contracts.py, read from the sources): every public function has
# a caller outside its own file, one class per header, no comment cites a tracker; then the
# check's own test.
contracts:
	$(PYTHON) scripts/contracts.py
	$(PYTHON) -m pytest -q -p no:cacheprovider tests/scripts/test_contracts.py

# The other scripts' own tests (fresh-run.sh, the unit tests' declared skips).
scripts-test: unit
	$(PYTHON) -m pytest -q -p no:cacheprovider tests/scripts \
	  --ignore=tests/scripts/test_layers.py --ignore=tests/scripts/test_contracts.py

test: all layers contracts unit scripts-test integration

# A developer's loop (docs/testing.md): everything but the integration tests marked slow.
test-fast: all layers contracts unit scripts-test template $(B)/tests/test_gw_vm_boot
	$(INTEGRATION) -m "not slow" $(PYTEST_ARGS)

# `make test` as a new machine and a background launcher run it: an empty HOME, SIGINT ignored,
# stdin closed (scripts/fresh-run.sh). What CI runs.
test-fresh:
	bash scripts/fresh-run.sh $(MAKE) test

# Sanitizer build of everything, unit tests and the integration suite against it.
# Reports go to files (the kernel's fd 2 is its capture pipe), and any report
# fails the target.
SAN_LOG := $(abspath build/san)/sanitizer
check:
	@# 1777: the test that runs the gateway as nobody writes its reports here too.
	mkdir -p build/san && chmod 1777 build/san && rm -f $(SAN_LOG).*
	@# ASan's allocator makes big buffers slow (freeing 256 MiB alone takes ~0.3 s): the
	@# reactor watchdog and the tests' time bounds are looser for this build only.
	ASAN_OPTIONS=log_path=$(SAN_LOG) UBSAN_OPTIONS=log_path=$(SAN_LOG):print_stacktrace=1 \
	  CELLVM_WATCHDOG_MS=500 CELLVM_TIMING_SCALE=5 \
	  $(MAKE) SANITIZER=address,undefined CC=$(CC) unit integration
	@if ls $(SAN_LOG).* >/dev/null 2>&1; then echo "sanitizer reports:"; head -50 $(SAN_LOG).*; exit 1; fi
	@echo "make check: no sanitizer reports"


FUZZ_TARGETS := $(patsubst tests/fuzz/%.c,build/fuzz/%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_CC := clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -Ichannel -Igateway \
           -Iguest-image/init
build/fuzz/fuzz_ch_%: tests/fuzz/fuzz_ch_%.c $(CH_SRC) | $(DEPS_STAMP)
	@mkdir -p build/fuzz
	$(FUZZ_CC) -o $@ $^ -ljansson -lcrypto
build/fuzz/fuzz_gw_%: tests/fuzz/fuzz_gw_%.c $(GW_SRC) | $(DEPS_STAMP)
	@mkdir -p build/fuzz
	$(FUZZ_CC) -o $@ $^ $(GW_LIBS) -ljansson
build/fuzz/fuzz_gi_%: tests/fuzz/fuzz_gi_%.c $(GI_SRC) | $(DEPS_STAMP)
	@mkdir -p build/fuzz
	$(FUZZ_CC) -o $@ $^ -ljansson -lcrypto -lm
fuzz: $(FUZZ_TARGETS)
	@set -e -o pipefail; for f in $^; do echo "== $$f for $(FUZZ_TIME)s"; mkdir -p build/fuzz/corpus-$$(basename $$f); \
	  $$f -max_total_time=$(FUZZ_TIME) -max_len=65536 -rss_limit_mb=2048 build/fuzz/corpus-$$(basename $$f) tests/fuzz/seeds/$$(basename $$f) 2>&1 | tail -n 3; done

# cellvm-mcp (docs/mcp.md): an MCP server on stdio that drives cellvm-gateway processes as a
# Jupyter client, with the gateway's own wire codec, signing and connection-file code.
MC_GW_SRC := gateway/wire/gw_wire.c gateway/wire/gw_frames.c gateway/wire/gw_hmac.c gateway/wire/gw_conn.c
MC_SRC := $(filter-out mcp/mc_main.c,$(wildcard mcp/mc_*.c))
MC_OBJ := $(MC_SRC:%.c=$(B)/obj/%.o) $(MC_GW_SRC:%.c=$(B)/obj/%.o) $(CH_OBJ)
MC_TESTS := $(patsubst tests/unit/%.c,$(B)/tests/%,$(wildcard tests/unit/test_mc_*.c))
.PHONY: mcp
all: $(B)/cellvm-mcp
mcp: $(B)/cellvm-mcp
unit: $(MC_TESTS)
$(B)/cellvm-mcp: $(B)/obj/mcp/mc_main.o $(MC_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(GW_LIBS) -ljansson -lcrypto
$(B)/tests/test_mc_%: tests/unit/test_mc_%.c $(MC_OBJ) $(TU_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Imcp $(LDFLAGS) -o $@ $(filter %.c %.o,$^) $(GW_LIBS) -ljansson -lcrypto -lcmocka
build/fuzz/fuzz_mc_%: tests/fuzz/fuzz_mc_%.c $(MC_SRC) $(MC_GW_SRC) $(CH_SRC) | $(DEPS_STAMP)
	@mkdir -p build/fuzz
	$(FUZZ_CC) -Imcp -o $@ $^ $(GW_LIBS) -ljansson -lcrypto

sizes:
	$(PYTHON) scripts/sizes.py

bench: all
	CELLVM_BUILD=$(abspath $(B)) $(PYTHON) bench/bench.py

run: all template
	CELLVM_BUILD=$(abspath $(B)) CELLVM_IMAGE=$(abspath build/image) bash scripts/run.sh

# cellvm behind Jupyter Server on 127.0.0.1 (docs/remote.md): REST + WebSocket, a token, culling.
serve: all template
	CELLVM_BUILD=$(abspath $(B)) bash scripts/serve.sh

install: all
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(B)/cellvm-kernel $(B)/cellvm-gateway $(B)/cellvm-launch $(B)/cellvm-remote $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(B)/cellvm-jailshim.so $(DESTDIR)$(PREFIX)/bin/
	if [ -d build/image ]; then install -d $(DESTDIR)$(PREFIX)/share/cellvm/image && \
	  cp --sparse=always -L build/image/* $(DESTDIR)$(PREFIX)/share/cellvm/image/; fi
	CELLVM_IMAGE_DIR=$(PREFIX)/share/cellvm/image bash scripts/kernelspec.sh cellvm $(PREFIX) $(DESTDIR)$(PREFIX)/share/jupyter/kernels/cellvm/kernel.json bin
	CELLVM_IMAGE_DIR=$(PREFIX)/share/cellvm/image bash scripts/kernelspec.sh cellvm-agent $(PREFIX) $(DESTDIR)$(PREFIX)/share/jupyter/kernels/cellvm-agent/kernel.json bin
	CELLVM_IMAGE_DIR=$(PREFIX)/share/cellvm/image bash scripts/kernelspec.sh cellvm-5.5 $(PREFIX) $(DESTDIR)$(PREFIX)/share/jupyter/kernels/cellvm-5.5/kernel.json bin
	CELLVM_IMAGE_DIR=$(PREFIX)/share/cellvm/image bash scripts/kernelspec.sh cellvm-notebook $(PREFIX) $(DESTDIR)$(PREFIX)/share/jupyter/kernels/cellvm-notebook/kernel.json bin
	bash scripts/kernelspec.sh cellvm-unsafe-local $(PREFIX) $(DESTDIR)$(PREFIX)/share/jupyter/kernels/cellvm-unsafe-local/kernel.json bin
	CELLVM_IMAGE_DIR=$(PREFIX)/share/cellvm/image bash scripts/kernelspec.sh cellvm-remote $(PREFIX) $(DESTDIR)$(PREFIX)/share/jupyter/kernels/cellvm-remote/kernel.json bin
	CELLVM_IMAGE_DIR=$(PREFIX)/share/cellvm/image bash scripts/kernelspec.sh cellvm-slurm $(PREFIX) $(DESTDIR)$(PREFIX)/share/jupyter/kernels/cellvm-slurm/kernel.json bin
	@# The Slurm provisioner runs inside Jupyter's own process: it goes where Debian's Python
	@# looks (/usr/local/lib/python3/dist-packages for PREFIX=/usr/local), entry point included.
	install -d $(DESTDIR)$(PREFIX)/lib/python3/dist-packages/cellvm_slurm-0.1.dist-info
	install -m 644 provisioner/cellvm_slurm.py $(DESTDIR)$(PREFIX)/lib/python3/dist-packages/
	install -m 644 provisioner/cellvm_slurm-0.1.dist-info/* $(DESTDIR)$(PREFIX)/lib/python3/dist-packages/cellvm_slurm-0.1.dist-info/

clean:
	rm -rf build/obj build/san build/tests build/fuzz build/share build/cellvm-*

-include $(shell find $(B)/obj $(B)/tests -name '*.d' 2>/dev/null)
