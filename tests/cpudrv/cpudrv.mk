# CPU test driver: $(B)/cpudrv/libcuda.so.1 implements the CUDA driver API on the CPU so
# that mpsshim-server can run the CI tier on machines without a GPU (a test double only).
# `make cpudrv-selftest` builds and runs its own test against the kernels of tests/kernels.

CPUDRV_DIR       := $(B)/cpudrv
CPUDRV_LIB       := $(CPUDRV_DIR)/libcuda.so.1
CPUDRV_MAP       := $(CPUDRV_DIR)/exports.map
CPUDRV_SRCS      := $(filter-out tests/cpudrv/selftest%.c,$(wildcard tests/cpudrv/*.c))
# The 580 driver's cuGetProcAddress answers and the exported names come from the generator.
CPUDRV_OBJS      := $(patsubst tests/cpudrv/%.c,$(CPUDRV_DIR)/obj/%.o,$(CPUDRV_SRCS)) \
                    $(B)/obj/gen/shim_procaddr.o
CPUDRV_HDRS      := tests/cpudrv/cpudrv.h tests/cpudrv/graph.h tests/cpudrv/cpudrv_exports.h \
                    server/control/trace_cupti.h \
                    $(GEN_OUT)
CPUDRV_TEST      := $(CPUDRV_DIR)/selftest
# CUPTI's activity calls answered by the driver itself (cupti.c): a server given this path
# (MPSSHIM_CUPTI) loads the same library again, which the loader finds already loaded.
CPUDRV_CUPTI     := $(CPUDRV_DIR)/libcupti.so
CPUDRV_TEST_SRCS := $(wildcard tests/cpudrv/selftest*.c)

all: $(CPUDRV_LIB) $(CPUDRV_TEST) $(CPUDRV_CUPTI)

$(CPUDRV_DIR)/obj/%.o: tests/cpudrv/%.c $(CPUDRV_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c -o $@ $<

# Only the cu* entry points leave the library.
$(CPUDRV_MAP): tests/cpudrv/cpudrv.mk
	@mkdir -p $(@D)
	@printf '{\n  global: cu*;\n  local: *;\n};\n' > $@

$(CPUDRV_LIB): $(CPUDRV_OBJS) $(CPUDRV_MAP)
	$(CC) -shared -Wl,-soname,libcuda.so.1 -Wl,--version-script=$(CPUDRV_MAP) \
		-Wl,--no-undefined -o $@ $(CPUDRV_OBJS) $(LDFLAGS) -lm

$(CPUDRV_CUPTI): $(CPUDRV_LIB)
	ln -sf libcuda.so.1 $@

$(CPUDRV_TEST): $(CPUDRV_TEST_SRCS) tests/cpudrv/selftest.h $(CPUDRV_LIB)
	$(CC) $(CFLAGS) -o $@ $(CPUDRV_TEST_SRCS) -L$(CPUDRV_DIR) -l:libcuda.so.1 \
		-Wl,-rpath,'$$ORIGIN' $(LDFLAGS) -lm -ldl

.PHONY: cpudrv-selftest
cpudrv-selftest: $(CPUDRV_TEST) $(KERNELS)
	$(CPUDRV_TEST) $(B)/tests
