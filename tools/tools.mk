# Developers' tools for the GPU machine (nothing of mpsshim runs with them): exptrace, an
# LD_AUDIT module that logs a program's use of the real driver's hidden export tables.
EXPTRACE := $(B)/tools/libexptrace.so

all: $(EXPTRACE)

$(EXPTRACE): tools/exptrace.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -shared -o $@ $< -pthread
