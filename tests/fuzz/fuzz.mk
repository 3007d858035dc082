# libFuzzer targets (clang, with ASan and UBSan) over the code that reads what clients send:
# the described-call decoder, the image parsers, the copy planner, and the server's own
# operations replayed in the fuzzer's process over the CPU test driver (fuzz_server).
# `make fuzz` builds them into $(B)/fuzz; tests/fuzz/run.sh runs them (a short run in CI, a
# long one by hand).
FUZZ_CC     ?= clang
FUZZ_FLAGS  := -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
               -std=gnu11 -I$(CUDA)/include -I. -I$(B)/gen
FUZZ_NAMES  := fuzz_records fuzz_images fuzz_copyplan fuzz_server
FUZZ_BIN    := $(addprefix $(B)/fuzz/,$(FUZZ_NAMES))
FUZZ_CHAN   := channel/marshal.c channel/image.c channel/copyplan.c channel/sizes.c

.PHONY: fuzz
fuzz: $(FUZZ_BIN) $(B)/fuzz/seed_records $(B)/fuzz/seed_images $(B)/fuzz/repro_hostfn_seq \
      $(B)/fuzz/repro_waitvalue $(B)/fuzz/repro_waitfree $(B)/fuzz/repro_priority

# Valid records to start the decoder's fuzzing from (tests/fuzz/run.sh uses them).
$(B)/fuzz/seed_records: tests/fuzz/seed_records.c $(CHANNEL_OBJ)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $^ $(LDFLAGS)

# Findings of fuzz_server, as plain clients of a live server (tests/fuzz/repro.sh runs them).
$(B)/fuzz/repro_%: tests/fuzz/repro_%.c tests/fuzz/repro_client.h $(CHANNEL_OBJ)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(CHANNEL_OBJ) $(LDFLAGS)

# Well-formed images (ELF, fat binary, PTX) to start the image parsers' fuzzing from.
$(B)/fuzz/seed_images: tests/fuzz/seed_images.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $^ $(LDFLAGS)

$(B)/fuzz/%: tests/fuzz/%.c $(FUZZ_CHAN) $(B)/gen/shim_desc.c $(B)/gen/shim_ids.h
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $< $(FUZZ_CHAN) $(B)/gen/shim_desc.c

# fuzz_server: every server file but the three tests/fuzz/srvharness.c includes for their
# static functions (main.c, client.c, worker.c), and the channel's, instrumented for the
# fuzzer; the CPU test driver it replays on is the ordinary build's ($(B)/cpudrv), loaded by
# path at run time, and the kernels it loads are $(B)/tests's.
FUZZ_OBJ_FLAGS := -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined \
                  -std=gnu11 -pthread -D__CUDA_API_VERSION_INTERNAL -I$(CUDA)/include -I. -I$(B)/gen \
                  -Wall -Wextra -Werror -Wno-missing-field-initializers
FUZZ_SRV_SRC := $(filter-out server/control/main.c server/core/client.c server/core/worker.c server/control/ctl.c server/control/ctlgpus.c server/control/ctlio.c server/control/run.c,\
                  $(wildcard server/*/*.c)) $(wildcard channel/*.c)
FUZZ_SRV_OBJ := $(patsubst %.c,$(B)/fuzz/obj/%.o,$(FUZZ_SRV_SRC)) \
                $(addprefix $(B)/fuzz/obj/gen/,shim_desc.o srv_hooks.o shim_procaddr.o)
FUZZ_SRV_HDR := $(GEN_OUT) $(wildcard channel/*.h server/*/*.h)

$(B)/fuzz/obj/%.o: %.c $(FUZZ_SRV_HDR)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_OBJ_FLAGS) -c -o $@ $<

$(B)/fuzz/obj/gen/%.o: $(B)/gen/%.c $(FUZZ_SRV_HDR)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_OBJ_FLAGS) -c -o $@ $<

$(B)/fuzz/obj/channel/version.o: private FUZZ_OBJ_FLAGS += -DMPSSHIM_RELEASE='"fuzz"' -DMPSSHIM_COMMIT='""'

$(B)/fuzz/fuzz_server: tests/fuzz/fuzz_server.c tests/fuzz/srvharness.c tests/fuzz/srvharness.h \
                       server/control/main.c server/core/client.c server/core/worker.c $(FUZZ_SRV_OBJ) \
                       | $(CPUDRV_LIB) $(KDIR)/kernels.ptx $(KDIR)/cond.ptx
	$(FUZZ_CC) $(FUZZ_OBJ_FLAGS) -fsanitize=fuzzer -o $@ tests/fuzz/fuzz_server.c \
		tests/fuzz/srvharness.c $(FUZZ_SRV_OBJ) -lffi -ldl
