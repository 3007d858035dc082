# mpsshim build. `make` builds everything into build/; `make test` is the CI tier,
# `make demo` the main job, `make gpu-test` the GPU tier, `make bench` the benchmarks.
# Each part of the tree adds its own rules through the *.mk fragment in its folder.

CUDA      ?= /usr/local/cuda
NVCC      ?= $(CUDA)/bin/nvcc
PYTHON    ?= python3
B         ?= build
CC        ?= gcc

WARN      := -Wall -Wextra -Werror -Wshadow -Wno-missing-field-initializers
# make PROFILE=1: counts where waits go (channel/prof.h), reported in the logs and on exit.
ifdef PROFILE
PROF_FLAGS := -DMPSSHIM_PROFILE
endif
# make STAMPS=1: notes the moments of each request at both ends (channel/stamp.h), for
# bench/stamps.py.
ifdef STAMPS
PROF_FLAGS += -DMPSSHIM_STAMPS
endif
CFLAGS    ?= -O2 -g
CFLAGS    += -std=gnu11 -pthread -fPIC $(WARN) $(PROF_FLAGS) -I$(CUDA)/include -I. -I$(B)/gen
LDFLAGS   += -pthread

# The CUDA toolkit's link stub: test programs are linked against it and get, at run time,
# the real driver, or the shim through LD_PRELOAD (its SONAME is libcuda.so.1 too).
CUDA_STUB := -L$(CUDA)/lib64/stubs -lcuda

# The release, defined once (the VERSION file); built from git, the commit is added (with
# -dirty for uncommitted changes). channel/version.c alone is compiled with them.
MPSSHIM_RELEASE := $(shell cat VERSION)
MPSSHIM_COMMIT  := $(shell test -e .git && git rev-parse --short=12 HEAD 2>/dev/null)$(shell \
                   test -e .git && ! git diff --quiet HEAD -- 2>/dev/null && echo -dirty)

.PHONY: all deps test demo gpu-test soak bench clean format install uninstall slurm-test programs
all:

include gen/gen.mk
include channel/channel.mk
include interpose/interpose.mk
include server/server.mk
include tests/kernels/kernels.mk
include tests/cpudrv/cpudrv.mk
include tests/unit/unit.mk
include tests/fuzz/fuzz.mk
include tests/progs/progs.mk
include tests/cudart/cudart.mk
include bench/bench.mk
include demo/demo.mk
include tools/tools.mk

# Installs what the build needs when it is missing (Debian/Ubuntu; CI runs as root).
deps:
	@CC="$(CC)" sh tests/deps.sh $(DEPS_FOR)
# The test command also installs what only CI's rows use (debhelper: tests/deb.sh).
test: DEPS_FOR := test

# The test and demo builds use every CPU (CI's 2 cores once built serially in about 150 s of
# its 9 minutes; with both, 120 s of its 8 now), unless the caller already gave make a job count.
# (Recursive: MAKEFLAGS holds the job count only once recipes run.)
# A comma, for call arguments that hold one.
, := ,

NPROC := $(shell nproc 2>/dev/null || echo 1)
JOBS = $(if $(filter -j%,$(MAKEFLAGS)),,-j$(NPROC))

# $(call quiet_build,LOG,TARGETS,WHAT): builds TARGETS with every CPU, quietly: the compiler's
# lines go to $(B)/LOG, with a line of progress every 10 s and the log's end when the build
# fails (tools/quiet_build.sh); `make V=1 ...` shows them as they come instead. (A build of
# the tests printed hundreds of command lines; the demo's was silent for a minute.)
quiet_build = $(if $(V),$(MAKE) --no-print-directory $(JOBS) $(2),\
	bash tools/quiet_build.sh $(B)/$(1) "$(3)" $(MAKE) --no-print-directory $(JOBS) $(2))

test: deps
	@$(call quiet_build,test-build.log,all fuzz,everything the tests run)
	@bash tests/ci.sh $(B)

# The CI tier with every program through each server setting that tests/coalesce.sh and
# tests/moved_programs.sh otherwise run for the programs that take its paths (tests/ci.sh).
.PHONY: test-full
test-full: export MPSSHIM_CI_FULL := 1
test-full: test

# The demo builds only what it runs.
demo: deps
	@$(call quiet_build,demo-build.log,$(SRV_BIN) $(CTL_BIN) $(SHIM_LIB) $(CPUDRV_LIB) $(DEMO_BIN),the server$(,) the shim$(,) the CPU test driver and the demo client)
	@bash demo/run.sh $(B)

gpu-test: all
	@bash tests/gpu.sh $(B)

# The soak of issue 11: CLIENTS clients at once for SECONDS, some killed, on this machine's
# GPU (else the CPU test driver). Default: 60 s, 16 clients.
SECONDS ?= 60
CLIENTS ?= 16
soak: all
	@bash tests/soak.sh $(B) $(SECONDS) $(CLIENTS)

bench: all
	@bash bench/run.sh $(B)

# The Slurm recipe (ops/slurm) against a real single-node Slurm: as root, installs
# slurm-wlm and munge when missing, runs its own daemons, one job of 3 tasks (tests/slurm.sh).
slurm-test: all
	@bash tests/slurm.sh $(B)

# `make install PREFIX=/usr/local DESTDIR=`: the programs in PREFIX/bin, the shim in
# PREFIX/lib/mpsshim (where mpsshim-run, and the shim looking for the server, expect them:
# channel/layout.h), the Slurm prolog, epilog and task prolog in PREFIX/lib/mpsshim/slurm
# (they find the programs from there), the systemd units in PREFIX/lib/systemd/{system,user}
# (the only installed files that name PREFIX: their ExecStart and, with the man pages,
# DOCDIR), README, LICENSE and docs/*.md in PREFIX/share/doc/mpsshim, the man pages in
# PREFIX/share/man/man1 (rendered from docs/man/*.1.md by tools/man.py at install, since
# they name DOCDIR). docs/operations.md says how each is used.
PREFIX     ?= /usr/local
BINDIR     := $(PREFIX)/bin
SHIMDIR    := $(PREFIX)/lib/mpsshim
SLURMDIR   := $(SHIMDIR)/slurm
SYSTEMDDIR ?= $(PREFIX)/lib/systemd
DOCDIR     := $(PREFIX)/share/doc/mpsshim
MANDIR     := $(PREFIX)/share/man/man1
INST_MAN   := $(notdir $(patsubst %.md,%,$(wildcard docs/man/*.1.md)))
INST_DOCS  := $(notdir $(wildcard docs/*.md))
INST_BINS  := $(notdir $(SRV_BIN) $(CTL_BIN) $(RUN_BIN))
INST_SLURM := prolog epilog task-prolog
INST_UNITS := system/mpsshim@.service user/mpsshim.service

# What install installs (and debian/rules builds): the programs and the shim, nothing else.
programs: $(SRV_BIN) $(CTL_BIN) $(RUN_BIN) $(SHIM_LIB)

install: programs
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(SHIMDIR) $(DESTDIR)$(SLURMDIR) $(DESTDIR)$(DOCDIR) \
		$(DESTDIR)$(SYSTEMDDIR)/system $(DESTDIR)$(SYSTEMDDIR)/user $(DESTDIR)$(DOCDIR)/docs \
		$(DESTDIR)$(MANDIR) $(B)/man
	install -m 755 $(SRV_BIN) $(CTL_BIN) $(RUN_BIN) $(DESTDIR)$(BINDIR)/
	install -m 755 $(SHIM_LIB) $(DESTDIR)$(SHIMDIR)/
	install -m 755 $(addprefix ops/slurm/,$(INST_SLURM)) $(DESTDIR)$(SLURMDIR)/
	install -m 644 ops/slurm/common.sh $(DESTDIR)$(SLURMDIR)/
	for u in $(INST_UNITS); do \
		sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@DOCDIR@|$(DOCDIR)|g' \
			ops/systemd/$$u.in >$(DESTDIR)$(SYSTEMDDIR)/$$u.tmp && \
		chmod 644 $(DESTDIR)$(SYSTEMDDIR)/$$u.tmp && \
		mv $(DESTDIR)$(SYSTEMDDIR)/$$u.tmp $(DESTDIR)$(SYSTEMDDIR)/$$u || exit 1; \
	done
	install -m 644 README.md LICENSE $(DESTDIR)$(DOCDIR)/
	install -m 644 $(addprefix docs/,$(INST_DOCS)) $(DESTDIR)$(DOCDIR)/docs/
	for m in $(INST_MAN); do \
		$(PYTHON) tools/man.py docs/man/$$m.md "$(MPSSHIM_RELEASE)" "$(DOCDIR)" >$(B)/man/$$m || exit 1; \
	done
	install -m 644 $(addprefix $(B)/man/,$(INST_MAN)) $(DESTDIR)$(MANDIR)/

uninstall:
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(INST_BINS)) $(DESTDIR)$(SHIMDIR)/libmpsshim.so \
		$(addprefix $(DESTDIR)$(SLURMDIR)/,$(INST_SLURM) common.sh) \
		$(addprefix $(DESTDIR)$(SYSTEMDDIR)/,$(INST_UNITS)) \
		$(DESTDIR)$(DOCDIR)/README.md $(DESTDIR)$(DOCDIR)/LICENSE \
		$(addprefix $(DESTDIR)$(DOCDIR)/docs/,$(INST_DOCS)) $(addprefix $(DESTDIR)$(MANDIR)/,$(INST_MAN))
	-rmdir $(DESTDIR)$(DOCDIR)/docs $(DESTDIR)$(SLURMDIR) $(DESTDIR)$(SHIMDIR) $(DESTDIR)$(DOCDIR) \
		$(DESTDIR)$(SYSTEMDDIR)/system $(DESTDIR)$(SYSTEMDDIR)/user $(DESTDIR)$(SYSTEMDDIR) 2>/dev/null

# `make install-mps-compat` (opt-in; PREFIX and DESTDIR as for install): install, then
# nvidia-cuda-mps-control and nvidia-cuda-mps-server, links to ours, in a directory of
# their own (MPSCOMPATDIR) that a site puts first on PATH so that MPS's scripts run
# unchanged; under those names the programs use MPS's variables and default directories
# (docs/mps-compat.md). Never over NVIDIA's files: a name there that is not a link to ours
# is refused. `make uninstall` removes the links too.
MPSCOMPATDIR ?= $(SHIMDIR)/mps-compat/bin
MPSCOMPAT    := nvidia-cuda-mps-control:mpsshim-control nvidia-cuda-mps-server:mpsshim-server
.PHONY: install-mps-compat uninstall-mps-compat
install-mps-compat: install
	install -d $(DESTDIR)$(MPSCOMPATDIR)
	rel=$$(realpath -m --relative-to=$(MPSCOMPATDIR) $(BINDIR)) && \
	for m in $(MPSCOMPAT); do \
		name=$${m%%:*} ours=$$rel/$${m#*:} at=$(DESTDIR)$(MPSCOMPATDIR)/$${m%%:*}; \
		if { [ -e "$$at" ] || [ -L "$$at" ]; } && [ "$$(readlink "$$at")" != "$$ours" ]; then \
			echo "$$at exists and is not mpsshim's (NVIDIA's?): not replacing it;" \
				"set MPSCOMPATDIR to a directory of mpsshim's own" >&2; exit 1; \
		fi; \
		ln -sfn "$$ours" "$$at" || exit 1; \
	done

uninstall: uninstall-mps-compat
uninstall-mps-compat:
	rel=$$(realpath -m --relative-to=$(MPSCOMPATDIR) $(BINDIR)) && \
	for m in $(MPSCOMPAT); do \
		at=$(DESTDIR)$(MPSCOMPATDIR)/$${m%%:*}; \
		[ "$$(readlink "$$at")" = "$$rel/$${m#*:}" ] && rm -f "$$at"; \
	done; true
	-rmdir $(DESTDIR)$(MPSCOMPATDIR) $(DESTDIR)$(SHIMDIR)/mps-compat 2>/dev/null

# Formats the tracked C, header and CUDA sources with clang-format 19: tools/format.sh says
# which files and which version; CI's format-clean row checks the same with it.
format:
	@bash tools/format.sh fix

clean:
	rm -rf $(B)
