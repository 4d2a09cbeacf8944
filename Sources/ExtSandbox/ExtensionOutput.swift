import Glibc
import SandboxRuntime
import SandboxSystem

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
    /// Both streams into a copy of a host descriptor, made by ``into(_:)`` and owned here: every
    /// launch of the process (a relaunch after an end too) uses this copy, never a number the
    /// host may since have closed and reused for another file.
    case descriptor(FileDescriptor)

    /// Both streams into a copy of `descriptor` (close-on-exec), typically the write end of a pipe
    /// whose read end the host logs. The host may close its own descriptor at once. Whatever the
    /// file is, the extension can write to it and can change the flags of the open file it shares
    /// with the host: pass nothing you would not hand to the extension itself (not a terminal).
    /// Throws ``ExtensionError/outputUnusable(errorNumber:)`` when `descriptor` cannot be copied.
    public static func into(_ descriptor: Int32) throws(ExtensionError) -> ExtensionOutput {
        guard let copy = FileDescriptor(adopting: fcntl(descriptor, F_DUPFD_CLOEXEC, 3)) else {
            throw .outputUnusable(errorNumber: errno)
        }
        return .descriptor(copy)
    }

    public static func == (a: ExtensionOutput, b: ExtensionOutput) -> Bool {
        switch (a, b) {
        case (.discard, .discard): true
        case (.descriptor(let x), .descriptor(let y)): x === y
        default: false
        }
    }

    /// The sandbox's standard output and standard error.
    var stream: SandboxConfiguration.StandardStream {
        switch self {
        case .discard: .null
        case .descriptor(let descriptor): descriptor.isOpen ? .fileDescriptor(descriptor) : .null
        }
    }
}
