# The demo client of `make demo`.
DEMO_BIN := $(B)/demo/client

all: $(DEMO_BIN)

$(DEMO_BIN): demo/client.c | $(KERNELS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) $(CUDA_STUB)
