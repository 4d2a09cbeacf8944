// Types the host API's own signatures name (an interruption's reason, a host's locations, an
// invalid bundle's problem, a message's descriptors): `import ExtSandbox` alone is enough to write them.
@_exported import struct ExtensionCatalog.CatalogProblem
@_exported import struct ExtensionCatalog.ExtensionLocations
@_exported import enum SandboxRuntime.Termination
@_exported import class SandboxSystem.FileDescriptor
