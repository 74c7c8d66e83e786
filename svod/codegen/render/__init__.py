"""One renderer per language; C, OpenCL C and CUDA C share ``cstyle``."""
