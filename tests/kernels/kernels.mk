# Test kernels: PTX (JIT-compiled on any GPU, read by the CPU test driver), a cubin for
# sm_90 (Hopper, the GPU machine) and an uncompressed fat binary holding both. The
# __managed__ variables' kernels come as a fat binary only: the CPU test driver takes
# initial values from a cubin, not from PTX.
KDIR := $(B)/tests
KERNELS := $(KDIR)/kernels.ptx $(KDIR)/kernels2.ptx $(KDIR)/texture.ptx $(KDIR)/cond.ptx \
           $(KDIR)/kernels.sm_90.cubin $(KDIR)/kernels.fatbin $(KDIR)/managed.fatbin

# bench/throttle's kernel: GPU only (no CPU twin), so it stays out of KERNELS, which the
# CPU test driver's tests load.
GPU_KERNELS := $(KDIR)/throttle.ptx $(KDIR)/throttle.sm_90.cubin

all: $(KERNELS) $(GPU_KERNELS)

$(KDIR)/%.ptx: tests/kernels/%.cu
	@mkdir -p $(@D)
	$(NVCC) -ptx -arch=compute_90 -o $@ $<

$(KDIR)/%.sm_90.cubin: tests/kernels/%.cu
	@mkdir -p $(@D)
	$(NVCC) -cubin -arch=sm_90 -o $@ $<

$(KDIR)/%.fatbin: tests/kernels/%.cu
	@mkdir -p $(@D)
	$(NVCC) -fatbin -no-compress -gencode arch=compute_90,code=sm_90 \
		-gencode arch=compute_90,code=compute_90 -o $@ $<
