#include "FuzzDriver.h"
#include <stddef.h>
#include <stdint.h>

// From the libFuzzer runtime that `-sanitize=fuzzer` links in.
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));
// Defined once for every fuzz executable (Sources/FuzzMain, Swift, @_cdecl).
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int xsb_fuzz_main(int argc, char **argv) {
    return LLVMFuzzerRunDriver(&argc, &argv, LLVMFuzzerTestOneInput);
}
