// What a dynamic loader would do for a static executable, before anything else runs: a static
// PIE (scripts/build-cli links every product so) is loaded at a random address with its
// pointers in data still relative to 0, so its R_*_RELATIVE relocations are applied here, and
// the RELRO pages (GOT, constant pointer tables) are then made read-only, as glibc's start-up
// did for the init. A position-dependent build has no relocations: only the RELRO protection.
//
// Nothing here may read a global through the GOT or a pointer in data (they are not relocated
// yet): the ELF header is found through a hidden linker symbol, PC-relative.
#include "runtime.h"

#include <elf.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#if defined(__x86_64__)
#define XSB_RELATIVE R_X86_64_RELATIVE
#else
#define XSB_RELATIVE R_AARCH64_RELATIVE
#endif

#ifndef DT_RELR
#define DT_RELR 36
#endif

/// The executable's own ELF header, wherever it was loaded (defined by the linker).
extern const ElfW(Ehdr) __ehdr_start __attribute__((visibility("hidden")));

/// A relocation this runtime does not apply: end as the init does when it cannot start.
__attribute__((noreturn)) static void unsupported(void) {
    xsb_rt_exit_group(127);
}

void xsb_rt_relocate(unsigned long page_size) {
    const ElfW(Ehdr) *ehdr = &__ehdr_start;
    // A PIE is linked at 0: where its header is, is how far it moved.
    uintptr_t base = ehdr->e_type == ET_DYN ? (uintptr_t)ehdr : 0;
    const unsigned char *phdrs = (const unsigned char *)ehdr + ehdr->e_phoff;
    const ElfW(Phdr) *relro = NULL;
    const ElfW(Dyn) *dynamic = NULL;
    for (unsigned i = 0; i < ehdr->e_phnum; i++) {
        const ElfW(Phdr) *ph = (const ElfW(Phdr) *)(phdrs + (size_t)i * ehdr->e_phentsize);
        if (ph->p_type == PT_DYNAMIC) dynamic = (const ElfW(Dyn) *)(base + ph->p_vaddr);
        if (ph->p_type == PT_GNU_RELRO) relro = ph;
    }
    if (dynamic != NULL) {
        uintptr_t rela = 0, rela_size = 0, rela_entry = sizeof(ElfW(Rela));
        for (const ElfW(Dyn) *d = dynamic; d->d_tag != DT_NULL; d++) {
            switch (d->d_tag) {
            case DT_RELA: rela = base + d->d_un.d_ptr; break;
            case DT_RELASZ: rela_size = d->d_un.d_val; break;
            case DT_RELAENT: rela_entry = d->d_un.d_val; break;
            case DT_REL:
            case DT_RELR:
            case DT_NEEDED: unsupported();  // not what lld or gold make of the init
            default: break;
            }
        }
        if (rela_size != 0 && rela_entry == 0) unsupported();
        for (uintptr_t at = rela; at < rela + rela_size; at += rela_entry) {
            const ElfW(Rela) *r = (const ElfW(Rela) *)at;
            if (ELF64_R_TYPE(r->r_info) != XSB_RELATIVE) unsupported();
            *(uintptr_t *)(base + r->r_offset) = base + (uintptr_t)r->r_addend;
        }
    }
    if (relro != NULL) {
        // Whole pages only, of the kernel's size: a partial last page holds data that stays writable.
        uintptr_t mask = ~(uintptr_t)(page_size - 1);
        uintptr_t start = (base + relro->p_vaddr) & mask;
        uintptr_t end = (base + relro->p_vaddr + relro->p_memsz) & mask;
        if (end > start) (void)xsb_inline_syscall6(SYS_mprotect, (long)start, (long)(end - start), PROT_READ, 0, 0, 0);
    }
}
