// xsb-init: the sandbox init, PID 1 of every sandbox (Sources/CSandboxShim/init.c).
//
// A small static program of its own, so that a sandbox holds nothing of its host: the
// supervisor starts it with a vfork-style clone3 (CLONE_VM, no page table copied) straight
// into execveat of this file, in the sandbox's new namespaces, with exactly the fds the launch
// passes: the control socket (0), the launch description (1, a sealed memfd) and the fds for
// the program. It takes no arguments and reads no environment. Supervisors find it next to
// their own executable, in PREFIX/libexec/extsandbox, or where EXTSANDBOX_INIT says
// (Sources/SandboxRuntime/InitExecutable.swift).
#include <xsb_shim.h>

int main(void) { xsb_init_run(); }
