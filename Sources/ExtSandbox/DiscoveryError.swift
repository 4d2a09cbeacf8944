import ExtensionCatalog
import SandboxRuntime
import SandboxSystem

/// Why discovery, or a launch of a discovered extension, failed. A launch throws it inside
/// ``ExtensionError/discovery(_:)``, with the host API's other failures.
public enum DiscoveryError: Error, Sendable, CustomStringConvertible {
    /// A file discovery or a launch needs is broken, unreadable or unsafe: the approvals file,
    /// or the extension's bundle (its manifest, its executable) found no longer valid right
    /// before a launch. The problem names the file and line. Nothing ran.
    case catalog(CatalogProblem)
    /// The identity was not produced by discovery in this process (forged, or altered).
    case notDiscovered(identifier: String)
    /// The extension may not run now: uninstalled, changed, unapproved, disabled, out of scope.
    case refused(identifier: String, reason: String)
    /// The extension said READY with another identifier than the one it was launched as.
    case identifierMismatch(expected: String, actual: String)
    /// A file could not be written.
    case cannotWrite(path: String, reason: String)
    /// Discovery cannot follow changes to the extensions: the inotify instance, or its
    /// registration with the host's event monitor, failed. The runtime's typed cause (step
    /// `control`, the call, its `errno`: EMFILE for a host out of descriptors). No monitor was made.
    case watchFailed(SandboxError)

    /// One line, with control characters escaped (`\e`, `\n`, `\x7f`…): identifiers, paths and
    /// reasons come from bundles and from what the extension said.
    public var description: String {
        TerminalText.escaped(text)
    }

    private var text: String {
        switch self {
        case .catalog(let problem): return "\(problem)"
        case .notDiscovered(let identifier):
            return "refusing to launch \(identifier): its identity was not produced by discovery (AppExtensionPoint.Monitor)"
        case .refused(let identifier, let reason): return "refusing to launch \(identifier): \(reason)"
        case .identifierMismatch(let expected, let actual):
            return "the extension launched as \(expected) said READY as \(actual): identifiers must match"
        case .cannotWrite(let path, let reason): return "cannot write \(path): \(reason)"
        case .watchFailed(let error): return "cannot follow changes to the extensions: \(error)"
        }
    }
}

extension DiscoveryError {
    /// Why a discovered extension may not launch when its bundle, checked again, fails: gone
    /// (``refused(identifier:reason:)``: it is no longer installed), or its problem
    /// (``catalog(_:)``), naming the file and line.
    static func bundleNoLongerValid(_ problem: CatalogProblem, identifier: String) -> DiscoveryError {
        problem.kind == .notInstalled
            ? .refused(identifier: identifier, reason: "it is no longer installed (\(problem.file) is gone)")
            : .catalog(problem)
    }
}
