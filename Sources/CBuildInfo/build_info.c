#include "xsb_build_info.h"

// scripts/build-cli writes the build's description into this section of the linked binary
// (llvm-objcopy --update-section .xsb_build_info=FILE, FILE exactly this size, NUL-padded), so
// that a new commit does not change any compiler flag and rebuild everything. A plain
// `swift build` leaves it all NULs. volatile: its contents are not known at compile time.
__attribute__((section(".xsb_build_info"), used, aligned(1)))
volatile char xsb_build_info_storage[128] = {0};

const char *xsb_build_info(void) {
    // The last byte stays NUL whatever was written.
    xsb_build_info_storage[sizeof xsb_build_info_storage - 1] = 0;
    return (const char *)xsb_build_info_storage;
}
