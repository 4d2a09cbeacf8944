#ifndef XSB_FUZZ_DRIVER_H
#define XSB_FUZZ_DRIVER_H

/// Runs libFuzzer's driver over LLVMFuzzerTestOneInput with the process's arguments.
///
/// SwiftPM links a Linux executable with its `main` renamed to `<module>_main`, so libFuzzer's own
/// `main` cannot be used: each fuzz executable defines `<module>_main` and calls this.
int xsb_fuzz_main(int argc, char **argv);

#endif
