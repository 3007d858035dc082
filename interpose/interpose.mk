# libmpsshim.so: the client library, SONAME libcuda.so.1, exporting exactly the symbols
# cuda_symbols.txt lists (generated version script).
SHIM_SRC := $(wildcard interpose/*.c)
SHIM_OBJ := $(patsubst %.c,$(B)/obj/%.o,$(SHIM_SRC)) \
            $(B)/obj/gen/shim_stubs.o $(B)/obj/gen/shim_symtab.o $(B)/obj/gen/shim_procaddr.o
SHIM_LIB := $(B)/libmpsshim.so

all: $(SHIM_LIB)

$(SHIM_LIB): $(SHIM_OBJ) $(CHANNEL_OBJ) $(B)/gen/shim_exports.map
	$(CC) -shared -o $@ $(SHIM_OBJ) $(CHANNEL_OBJ) -Wl,-soname,libcuda.so.1 \
		-Wl,--version-script=$(B)/gen/shim_exports.map -Wl,-z,defs -Wl,-z,nodelete \
		$(LDFLAGS) -ldl
