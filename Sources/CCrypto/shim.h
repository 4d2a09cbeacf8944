#ifndef XSB_CCRYPTO_SHIM_H
#define XSB_CCRYPTO_SHIM_H
// libcrypto (Debian's libssl-dev): SHA-256 through EVP, for pinning approvals to file contents.
#include <openssl/evp.h>
#endif
