# Developers' tools for the GPU machine (nothing of mpsshim runs with them): exptrace, an
# LD_AUDIT module that logs a program's use of the real driver's hidden export tables;
# heldwait, which driver calls wait while a stream is held on a value in device memory.
EXPTRACE := $(B)/tools/libexptrace.so
HELDWAIT := $(B)/tools/heldwait

all: $(EXPTRACE) $(HELDWAIT)

$(HELDWAIT): tools/heldwait.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) $(CUDA_STUB) -pthread

$(EXPTRACE): tools/exptrace.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -shared -o $@ $< -pthread
