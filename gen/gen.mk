# The generator: cuda.h + cuda_symbols.txt (+ the real driver's cuGetProcAddress answers)
# -> C in $(B)/gen. Everything generated lives in the build tree only.
GEN_OUT := $(B)/gen/shim_ids.h $(B)/gen/shim_desc.c $(B)/gen/shim_stubs.c $(B)/gen/shim_impl.h \
           $(B)/gen/shim_symtab.c $(B)/gen/shim_procaddr.c $(B)/gen/shim_exports.map \
           $(B)/gen/srv_hooks.c $(B)/gen/srv_hooks.h \
           $(B)/gen/chan_ops.h $(B)/gen/srv_ops.h $(B)/gen/srv_ops.def \
           $(B)/gen/chan_payloads.h $(B)/gen/srv_payloads.def
GEN_PROCADDR := gen/data/procaddress-580.159.04.tsv
# The generator's modules: every gen/*.py but the tools that only read its model or the
# settings table, so that a new module is a dependency without a change here.
GEN_PY := $(filter-out gen/describe.py gen/support.py gen/settings_doc.py,$(wildcard gen/*.py))

$(GEN_OUT) &: $(GEN_PY) cuda_symbols.txt $(GEN_PROCADDR) $(CUDA)/include/cuda.h
	@mkdir -p $(B)/gen
	$(PYTHON) gen/gen.py --cuda-include $(CUDA)/include --symbols cuda_symbols.txt \
		--procaddr $(GEN_PROCADDR) --cc $(CC) --out $(B)/gen
	@touch $(GEN_OUT)

gen: $(GEN_OUT)
.PHONY: gen

# `make describe NAME=cuFoo`: one call's row in cuda_symbols.txt, what the generator derives
# from it and the code it generates for it (gen/describe.py; needs cuda.h, not a build).
describe:
	@$(PYTHON) gen/describe.py --cuda-include $(CUDA)/include --symbols cuda_symbols.txt \
		--procaddr $(GEN_PROCADDR) --cc $(CC) $(NAME)
.PHONY: describe

# `make doc`: the support matrix, docs/support.md, from cuda_symbols.txt (gen/support.py),
# and the settings reference, docs/settings.md, from channel/settings.def as the server
# prints it (gen/settings_doc.py). Committed, for readers on the web; CI fails when either
# differs from what this writes.
doc: $(SRV_BIN)
	@$(PYTHON) gen/support.py --symbols cuda_symbols.txt --out docs/support.md
	@$(SRV_BIN) --settings | $(PYTHON) gen/settings_doc.py --out docs/settings.md
.PHONY: doc
