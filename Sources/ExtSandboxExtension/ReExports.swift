// Types the SDK's own signatures name (a message's descriptors): `import ExtSandboxExtension`
// alone is enough to write them.
@_exported import class SandboxSystem.FileDescriptor
