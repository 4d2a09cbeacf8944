#ifndef XSB_CCRYPTO_SHIM_H
#define XSB_CCRYPTO_SHIM_H
// libcrypto (Debian's libssl-dev) through EVP: SHA-256 for pinning approvals to file contents,
// Ed25519 for bundle signatures.
#include <openssl/evp.h>
#endif
