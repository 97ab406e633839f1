/* sample_tokens.cpp — tests/windows/sample_tokens.c compiled as C++ (nctmc.h from C++). */
#include "sample_tokens.c"
