#ifndef XSB_CYAML_SHIM_H
#define XSB_CYAML_SHIM_H
// libyaml (Debian's libyaml-dev), the YAML 1.1 parser that policy files are read with.
#include <yaml.h>
#endif
