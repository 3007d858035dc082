# Code linked into both ends, every file of channel/: the segment and its ring/lanes/slots,
# waits, the generic call format, the staging plan, range tables, size functions, and the
# generated descriptors.
CHANNEL_SRC := $(wildcard channel/*.c)
CHANNEL_OBJ := $(patsubst %.c,$(B)/obj/%.o,$(CHANNEL_SRC)) $(B)/obj/gen/shim_desc.o

# mpsshim's own code sees cuda.h as the driver does: every versioned and per-thread entry
# point declared under its own name (no #define renaming cuMemAlloc to cuMemAlloc_v2).
MPSSHIM_CFLAGS := $(CFLAGS) -D__CUDA_API_VERSION_INTERNAL

$(B)/obj/%.o: %.c $(GEN_OUT) $(wildcard channel/*.h channel/*.def interpose/*.h server/*/*.h tests/unit/*.h)
	@mkdir -p $(@D)
	$(CC) $(MPSSHIM_CFLAGS) -c -o $@ $<

$(B)/obj/gen/%.o: $(B)/gen/%.c $(GEN_OUT) $(wildcard channel/*.h interpose/*.h server/*/*.h)
	@mkdir -p $(@D)
	$(CC) $(MPSSHIM_CFLAGS) -c -o $@ $<

# The version is compiled into channel/version.o only; the stamp changes (and the programs
# relink) only when the release or the commit does.
VERSION_STAMP := $(B)/obj/channel/version.stamp
$(VERSION_STAMP): FORCE
	@mkdir -p $(@D)
	@echo '$(MPSSHIM_RELEASE) $(MPSSHIM_COMMIT)' | cmp -s - $@ || \
		echo '$(MPSSHIM_RELEASE) $(MPSSHIM_COMMIT)' >$@
$(B)/obj/channel/version.o: $(VERSION_STAMP)
$(B)/obj/channel/version.o: private MPSSHIM_CFLAGS += -DMPSSHIM_RELEASE='"$(MPSSHIM_RELEASE)"' \
	-DMPSSHIM_COMMIT='"$(MPSSHIM_COMMIT)"'
FORCE:
