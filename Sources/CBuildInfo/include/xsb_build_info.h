#ifndef XSB_BUILD_INFO_H
#define XSB_BUILD_INFO_H

/// What scripts/build-cli recorded about the build (e.g. "commit 1a2b3c4 built 2026-11-24"),
/// or "" for a plain `swift build`.
const char *xsb_build_info(void);

#endif
