# Unit tests of code shared by both ends (no driver needed).
UNIT_BINS := $(B)/tests/unit/channel_test

all: $(UNIT_BINS)

$(B)/tests/unit/channel_test: $(B)/obj/tests/unit/channel_test.o $(CHANNEL_OBJ)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS)

UNIT_BINS += $(B)/tests/unit/rawclient
all: $(B)/tests/unit/rawclient

# The raw protocol client: main() in rawclient.c, the helpers every mode uses in
# rawsession.c, one file a group of modes (tests/unit/rawclient.h lists them).
RAWCLIENT_SRC := $(addprefix tests/unit/,rawclient.c rawsession.c rawconnect.c rawhostile.c \
                   rawmvars.c rawbatches.c rawwaits.c rawpayloads.c rawscribble.c rawfuzz.c rawshrink.c \
                   rawaccounts.c rawdevices.c rawmirror.c)

$(B)/tests/unit/rawclient: $(patsubst %.c,$(B)/obj/%.o,$(RAWCLIENT_SRC)) $(CHANNEL_OBJ)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS)

UNIT_BINS += $(B)/tests/unit/ranges_test
all: $(B)/tests/unit/ranges_test

$(B)/tests/unit/ranges_test: $(B)/obj/tests/unit/ranges_test.o $(B)/obj/channel/ranges.o
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS)

UNIT_BINS += $(B)/tests/unit/procaddr_test
all: $(B)/tests/unit/procaddr_test

# Linked against nothing of ours: it dlopens the shim like an application would.
$(B)/tests/unit/procaddr_test: tests/unit/procaddr_test.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) -ldl

UNIT_BINS += $(B)/tests/unit/procaddr_badserver
all: $(B)/tests/unit/procaddr_badserver

# A fake server (the channel's own code) in front of the dlopened shim.
$(B)/tests/unit/procaddr_badserver: $(B)/obj/tests/unit/procaddr_badserver.o $(CHANNEL_OBJ)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS) -ldl

UNIT_BINS += $(B)/tests/unit/export_test
all: $(B)/tests/unit/export_test

# Linked against nothing of ours: it dlopens the shim and asks for the export tables.
$(B)/tests/unit/export_test: tests/unit/export_test.c tests/unit/check.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) -ldl

UNIT_BINS += $(B)/tests/unit/trace_test
all: $(B)/tests/unit/trace_test

# The GPU timeline's summary and file (server/control/trace_write.c), run by tests/trace.sh.
$(B)/tests/unit/trace_test: $(B)/obj/tests/unit/trace_test.o $(B)/obj/server/control/trace_write.o
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS)

UNIT_BINS += $(B)/tests/unit/answer_test
all: $(B)/tests/unit/answer_test

# A control command's answer, growing past the old fixed 256 KiB (server/control/answer.c).
$(B)/tests/unit/answer_test: $(B)/obj/tests/unit/answer_test.o $(B)/obj/server/control/answer.o
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS)

UNIT_BINS += $(B)/tests/unit/physical_test
all: $(B)/tests/unit/physical_test

# The shim's physical memory handles per connection (interpose/physical.c), its neighbours
# stood in for by the test.
$(B)/tests/unit/physical_test: $(B)/obj/tests/unit/physical_test.o $(B)/obj/interpose/physical.o
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS)

UNIT_BINS += $(B)/tests/unit/owned_test
all: $(B)/tests/unit/owned_test

# The graphs, nodes and pools a moved process keeps with their servers (interpose/owned.c),
# its neighbours stood in for by the test.
$(B)/tests/unit/owned_test: $(B)/obj/tests/unit/owned_test.o $(B)/obj/interpose/owned.o
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS)
