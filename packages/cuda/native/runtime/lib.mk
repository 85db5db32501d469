# ---- runtime/: libcudart.so.13 and libcudart.so.12 (runtime/Makefile) ------------------
# Built by its own Makefile: the runtime is compiled twice, against the CUDA 13 and the
# CUDA 12 runtime headers, into _lib/cuda-runtime/, one directory below libcuda.so.1.
LIBRARIES += runtime
.PHONY: runtime
runtime:
	$(MAKE) -C $(HERE)/runtime PYTHON=$(PYTHON) BUILD=$(BUILD)/runtime LIBDIR=$(LIBDIR)/cuda-runtime \
	    $(if $(CUDA_INCLUDE),CUDA13_INCLUDE=$(CUDA_INCLUDE))
