# Developers' tools for the GPU machine (nothing of mpsshim runs with them): exptrace, an
# LD_AUDIT module that logs a program's use of the real driver's hidden export tables;
# heldwait, which driver calls wait while a stream is held on a value in device memory;
# ctxcost, what a second context costs in device memory (server/memory/quietctx.c);
# faultns, whether a fault reaches a second instance of the driver in the same process;
# libprofsample, a sampling profiler to preload where perf is missing (tools/profsum.py reads
# its samples; bench/cpusplit.py --prof runs both).
EXPTRACE := $(B)/tools/libexptrace.so
HELDWAIT := $(B)/tools/heldwait
CTXCOST := $(B)/tools/ctxcost
FAULTNS := $(B)/tools/faultns
PROFSAMPLE := $(B)/tools/libprofsample.so

all: $(EXPTRACE) $(HELDWAIT) $(CTXCOST) $(FAULTNS) $(PROFSAMPLE)

$(PROFSAMPLE): tools/profsample.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -shared -o $@ $< -pthread

$(FAULTNS): tools/faultns.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) -ldl

$(HELDWAIT): tools/heldwait.c tools/ck.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) $(CUDA_STUB) -pthread

$(CTXCOST): tools/ctxcost.c tools/ck.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) $(CUDA_STUB)

$(EXPTRACE): tools/exptrace.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -shared -o $@ $< -pthread
