# mpsshim-server (links the real driver at run time only, by dlopen), mpsshim-control and
# the launcher mpsshim-run.
SRV_SRC := $(filter-out server/control/ctl.c server/control/ctlgpus.c server/control/ctlio.c server/control/run.c,\
             $(wildcard server/*/*.c))
SRV_OBJ := $(patsubst %.c,$(B)/obj/%.o,$(SRV_SRC)) $(B)/obj/gen/srv_hooks.o \
           $(B)/obj/gen/shim_procaddr.o
SRV_BIN := $(B)/mpsshim-server
CTL_BIN := $(B)/mpsshim-control
RUN_BIN := $(B)/mpsshim-run

all: $(SRV_BIN) $(CTL_BIN) $(RUN_BIN)

$(SRV_BIN): $(SRV_OBJ) $(CHANNEL_OBJ)
	$(CC) -o $@ $(SRV_OBJ) $(CHANNEL_OBJ) $(LDFLAGS) -lffi -ldl

$(CTL_BIN): $(B)/obj/server/control/ctl.o $(B)/obj/server/control/ctlgpus.o $(B)/obj/server/control/ctlio.o \
		$(B)/obj/channel/spawn.o $(B)/obj/channel/settings.o \
		$(B)/obj/channel/version.o
	$(CC) -o $@ $^ $(LDFLAGS)

$(RUN_BIN): $(B)/obj/server/control/run.o $(B)/obj/channel/layout.o $(B)/obj/channel/version.o
	$(CC) -o $@ $^ $(LDFLAGS)
