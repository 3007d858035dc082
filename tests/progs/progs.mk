# Test programs: plain C against the CUDA driver API, linked with the toolkit's stub
# libcuda. The same binaries run natively on a GPU, through the shim on a GPU, and through
# the shim against the CPU test driver; tests/progs/programs.txt says which runs to make.
PROGS_NAMES  := vecadd memcpy_all streams_events modules launch contexts multithread hostfn multigpu \
                isolation smallkern copy_victim hold memlimit mempool vmm graphs graph_host ipc vmm_ipc \
                graph_nodes graph_mem waitvalue_exit runaway fault hostreg devices managed texsurf flood \
                capture_alloc graph_cond isolation2 poolrace free_wait idle_answers managed_vars \
                hostfn_stuck alloc_churn stack_limit coalesce_quiet whole_wait ctxless_node \
                hostreg_shrink free_order acct_limits first_launch batch_memop launchseq tensormap \
                peer ncclish copybatch managed_migrate managed_churn managed_devices hostfn_fault \
                ipc_across shmreg peer_events pool_peer twogpus thread_peer
PROGS_BIN    := $(addprefix $(B)/tests/,$(PROGS_NAMES))
PROGS_COMMON := $(B)/progs/common.o
PROGS_HDR    := tests/progs/common.h

all: $(PROGS_BIN) $(B)/tests/libholes.so

$(PROGS_COMMON): tests/progs/common.c $(PROGS_HDR)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c -o $@ $<

# Order-only on the kernel images so that a program built alone is ready to run.
$(PROGS_BIN): $(B)/tests/%: tests/progs/%.c $(PROGS_COMMON) $(PROGS_HDR) | $(KERNELS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(PROGS_COMMON) $(LDFLAGS) $(CUDA_STUB)

# A hole between a process's libraries (tests/clientspace.sh); no CUDA in it.
$(B)/tests/libholes.so: tests/progs/holes.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -shared -fPIC -o $@ $<

# NCCL's launch attributes, shared with tests/cudart/ncclsmem.cu.
$(B)/tests/ncclish: tests/progs/nccl_attrs.h
