# mpsshim-server (links the real driver at run time only, by dlopen) and mpsshim-control.
SRV_SRC := $(filter-out server/ctl.c,$(wildcard server/*.c))
SRV_OBJ := $(patsubst %.c,$(B)/obj/%.o,$(SRV_SRC))
SRV_BIN := $(B)/mpsshim-server
CTL_BIN := $(B)/mpsshim-control

all: $(SRV_BIN) $(CTL_BIN)

$(SRV_BIN): $(SRV_OBJ) $(CHANNEL_OBJ)
	$(CC) -o $@ $(SRV_OBJ) $(CHANNEL_OBJ) $(LDFLAGS) -lffi -ldl

$(CTL_BIN): $(B)/obj/server/ctl.o
	$(CC) -o $@ $< $(LDFLAGS)
