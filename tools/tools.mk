# Developers' tools for the GPU machine (nothing of mpsshim runs with them): exptrace, an
# LD_AUDIT module that logs a program's use of the real driver's hidden export tables;
# heldwait, which driver calls wait while a stream is held on a value in device memory;
# faultns, whether a fault reaches a second instance of the driver in the same process.
EXPTRACE := $(B)/tools/libexptrace.so
HELDWAIT := $(B)/tools/heldwait
FAULTNS := $(B)/tools/faultns

all: $(EXPTRACE) $(HELDWAIT) $(FAULTNS)

$(FAULTNS): tools/faultns.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) -ldl

$(HELDWAIT): tools/heldwait.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) $(CUDA_STUB) -pthread

$(EXPTRACE): tools/exptrace.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -shared -o $@ $< -pthread
