# libFuzzer targets (clang, with ASan and UBSan) over the code that reads what clients send:
# the described-call decoder, the image parsers, the copy planner. `make fuzz` builds them
# into $(B)/fuzz; tests/fuzz/run.sh runs them (a short run in CI, a long one by hand).
FUZZ_CC     ?= clang
FUZZ_FLAGS  := -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
               -std=gnu11 -I$(CUDA)/include -I. -I$(B)/gen
FUZZ_NAMES  := fuzz_records fuzz_images fuzz_copyplan
FUZZ_BIN    := $(addprefix $(B)/fuzz/,$(FUZZ_NAMES))
FUZZ_CHAN   := channel/marshal.c channel/image.c channel/copyplan.c channel/sizes.c

.PHONY: fuzz
fuzz: $(FUZZ_BIN) $(B)/fuzz/seed_records $(B)/fuzz/seed_images

# Valid records to start the decoder's fuzzing from (tests/fuzz/run.sh uses them).
$(B)/fuzz/seed_records: tests/fuzz/seed_records.c $(CHANNEL_OBJ)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $^ $(LDFLAGS)

# Well-formed images (ELF, fat binary, PTX) to start the image parsers' fuzzing from.
$(B)/fuzz/seed_images: tests/fuzz/seed_images.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $^ $(LDFLAGS)

$(B)/fuzz/%: tests/fuzz/%.c $(FUZZ_CHAN) $(B)/gen/shim_desc.c $(B)/gen/shim_ids.h
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $< $(FUZZ_CHAN) $(B)/gen/shim_desc.c
