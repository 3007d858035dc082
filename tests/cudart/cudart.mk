# CUDA runtime test programs: CUDA C++ built by nvcc, each twice: $(B)/tests/cudart/NAME with
# static cudart (nvcc's default) and NAME.shared with -cudart shared. cudart reaches the
# driver only through cuGetProcAddress and the hidden export tables, so these exercise both.
# The shared builds find libcudart.so.13 in the toolkit (rpath) wherever the loader would not.
# Fat binaries are left uncompressed, with PTX beside the sm_90 cubin: the CPU test driver
# reads kernels from the PTX (by `.entry` name, see tests/cudart/common.h).
CUDART_NAMES  := vecadd streams pinned multikernel ptds hostfn mallocasync graphs graphnodes managed texture \
                 capturealloc graph_cond managed_vars bigstack peer tma ncclsmem uvm_phases twogpus
CUDART_DIR    := $(B)/tests/cudart
CUDART_STATIC := $(addprefix $(CUDART_DIR)/,$(CUDART_NAMES))
CUDART_SHARED := $(addsuffix .shared,$(CUDART_STATIC))
CUDART_FLAGS  := -O2 --no-compress -gencode 'arch=compute_90,code=[sm_90,compute_90]' \
                 -Xcompiler -Wall
CUDART_DEPS   := tests/cudart/common.h tests/kernels/kernels.cu tests/kernels/texture.cu \
                 tests/kernels/cond.cu tests/kernels/managed.cu tests/progs/nccl_attrs.h

# Per program: extra sources (another translation unit is another module) and flags.
CUDART_SRCS_multikernel  := tests/kernels/kernels2.cu
CUDART_FLAGS_ptds        := --default-stream per-thread
CUDART_SRCS_managed_vars := tests/kernels/managed2.cu

# Each source is compiled once, into $(CUDART_DIR)/obj, and its objects linked twice, with
# either cudart: -cudart chooses only the library linked (when each build compiled the
# program again, nvcc took about a third of the CI tier's build). A program's other
# translation units are compiled as NAME-UNIT.o, with its flags.
CUDART_OBJ = $(CUDART_DIR)/obj/$(1).o \
             $(patsubst tests/kernels/%.cu,$(CUDART_DIR)/obj/$(1)-%.o,$(CUDART_SRCS_$(1)))

all: $(CUDART_STATIC) $(CUDART_SHARED)

$(CUDART_DIR)/obj/%.o: tests/cudart/%.cu $(CUDART_DEPS)
	@mkdir -p $(@D)
	$(NVCC) $(CUDART_FLAGS) $(CUDART_FLAGS_$*) -c -o $@ $<

define CUDART_UNITS
$(CUDART_DIR)/$(1) $(CUDART_DIR)/$(1).shared: $(call CUDART_OBJ,$(1))
$(CUDART_DIR)/obj/$(1)-%.o: tests/kernels/%.cu $(CUDART_DEPS)
	@mkdir -p $$(@D)
	$$(NVCC) $$(CUDART_FLAGS) $$(CUDART_FLAGS_$(1)) -c -o $$@ $$<
endef
$(foreach n,$(CUDART_NAMES),$(eval $(call CUDART_UNITS,$(n))))

$(CUDART_STATIC): $(CUDART_DIR)/%:
	$(NVCC) $(CUDART_FLAGS) -o $@ $^

$(CUDART_SHARED): $(CUDART_DIR)/%.shared:
	$(NVCC) $(CUDART_FLAGS) -cudart shared -Xlinker -rpath,$(CUDA)/lib64 -o $@ $^
