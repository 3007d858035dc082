# Benchmarks (bench/README.md): plain C against the driver API, linked with the toolkit's
# stub libcuda like the test programs, so that the same binaries run natively, under native
# MPS and under mpsshim. `make bench` runs bench/run.sh; bench/spin.cu is their one kernel of
# their own (the others come from tests/kernels). `make bench-throttle` runs bench/throttle.sh,
# the SM-share and memory-limit figures. bench/mpi_steps.c is built with mpicc where it is
# found (else the MPI figures say they were skipped), and always with bench/fakempi, a
# stand-in of MPI that lets the CPU test driver run bench/run.sh's MPI families where no MPI is
# installed (MPSSHIM_BENCH_CPU=1, to test the script); bench/fleet.py needs no build.
BENCH_NAMES := callbench copysweep fleetc freewait hostmem latprobe launchcost managed managedprobe onectx overlap throttle
BENCH_BIN   := $(addprefix $(B)/bench/,$(BENCH_NAMES))
BENCH_PTX   := $(B)/bench/spin.ptx
# The cold MPI job's image (mpi_steps --cold): sm_90 code and PTX, uncompressed (the CPU test
# driver reads the PTX), as nvcc builds a cudart program's kernels.
BENCH_FATBIN := $(B)/bench/spin.fatbin

all: $(BENCH_BIN) $(BENCH_PTX) $(BENCH_FATBIN)

# Order-only on the kernel images so that a benchmark built alone is ready to run.
$(BENCH_BIN): $(B)/bench/%: bench/%.c bench/common.c bench/common.h | $(KERNELS) $(GPU_KERNELS) \
	$(BENCH_PTX)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< bench/common.c $(LDFLAGS) $(CUDA_STUB)

$(BENCH_PTX): $(B)/bench/%.ptx: bench/%.cu
	@mkdir -p $(@D)
	$(NVCC) -ptx -arch=compute_90 -o $@ $<

$(BENCH_FATBIN): $(B)/bench/%.fatbin: bench/%.cu
	@mkdir -p $(@D)
	$(NVCC) -fatbin -no-compress -gencode arch=compute_90,code=sm_90 \
		-gencode arch=compute_90,code=compute_90 -o $@ $<

# The CPU test runs' mpi_steps: bench/fakempi's mpi.h and its calls in place of an MPI (beside
# mpi_steps, so that it finds the kernel images as mpi_steps does).
BENCH_FAKEMPI := $(B)/bench/mpi_steps_fakempi
all: $(BENCH_FAKEMPI)
$(BENCH_FAKEMPI): bench/mpi_steps.c bench/fakempi/fakempi.c bench/fakempi/mpi.h bench/common.c \
	bench/common.h | $(KERNELS) $(BENCH_PTX) $(BENCH_FATBIN)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Ibench/fakempi -o $@ $< bench/fakempi/fakempi.c bench/common.c $(LDFLAGS) \
		$(CUDA_STUB)

MPICC ?= $(shell command -v mpicc 2>/dev/null)
ifneq ($(MPICC),)
BENCH_MPI := $(B)/bench/mpi_steps
all: $(BENCH_MPI)
# An MPI installation that cannot build it costs the MPI figures only (bench/run.sh says they
# were skipped), not the build of everything else.
$(BENCH_MPI): bench/mpi_steps.c bench/common.c bench/common.h | $(KERNELS) $(BENCH_PTX) \
	$(BENCH_FATBIN)
	@mkdir -p $(@D)
	$(MPICC) $(CFLAGS) -o $@ $< bench/common.c $(LDFLAGS) $(CUDA_STUB) || \
		echo "warning: $(MPICC) could not build $@: make bench will skip the MPI figures"
endif

.PHONY: bench-throttle
bench-throttle: all
	@bash bench/throttle.sh $(B)
