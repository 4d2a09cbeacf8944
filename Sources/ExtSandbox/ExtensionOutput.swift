import SandboxRuntime

/// Where an extension's standard output and standard error go
/// (``AppExtensionProcess/Configuration/output``).
///
/// Never the host's own streams by default: they are often a terminal, and a process holding a
/// terminal's descriptor can read what the user types, change the terminal's settings, or make
/// the host's output non-blocking under it (the open file is shared). An untrusted extension gets
/// none of that; its standard input is always `/dev/null`.
public enum ExtensionOutput: Sendable, Equatable {
    /// Discarded (`/dev/null`): the default.
    case discard
    /// Both streams into `descriptor`, which the host keeps owning (the sandbox gets its own copy
    /// at launch). Typically the write end of a pipe whose read end the host logs. Whatever the
    /// descriptor is, the extension can write to it, and can change the flags of the open file it
    /// shares with the host: pass a terminal or a file you would not hand to the extension itself.
    case fileDescriptor(Int32)

    /// The sandbox's standard output and standard error.
    var stream: SandboxConfiguration.StandardStream {
        switch self {
        case .discard: .null
        case .fileDescriptor(let descriptor): .fileDescriptor(descriptor)
        }
    }
}
