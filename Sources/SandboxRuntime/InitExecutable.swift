import CSandboxShim
import Glibc
import SandboxPolicy
import SandboxSystem

/// The sandbox init, `xsb-init`: the small static C program every sandbox starts as its PID 1
/// (`Sources/xsb-init`, `Sources/CSandboxShim/init.c`).
///
/// The supervisor opens it once, `O_PATH`, after ``TrustedPath``'s checks (the file and every
/// directory above it owned by root or the caller, not writable by group or others, symbolic links
/// only where those could have placed them), and execs every sandbox's init through that fd
/// (`execveat`), so the file that runs is the one that was checked. It is looked for, in order:
/// - `$EXTSANDBOX_INIT` when set and not empty (development; then nothing else);
/// - next to the running executable, symbolic links resolved (`.build/debug` for the tests, the
///   demo and the benchmarks: SwiftPM builds it with the package);
/// - `PREFIX/libexec/extsandbox/xsb-init`, PREFIX being the parent of the executable's directory
///   (where `scripts/install` puts it for `PREFIX/bin/extsandbox`);
/// - `/usr/local/libexec/extsandbox/xsb-init` and `/usr/libexec/extsandbox/xsb-init` (an
///   installed extsandbox, for hosts built elsewhere that link the library).
struct InitExecutable: Sendable {
    /// The environment variable that names the init explicitly.
    static let variable = "EXTSANDBOX_INIT"
    /// The file name, and the install's directory below the prefix.
    static let name = "xsb-init"
    static let installSubdirectory = "libexec/extsandbox"

    /// `O_PATH` and close-on-exec; open as long as the supervisor.
    let file: FileDescriptor
    /// The descriptor's number, for the C launch (which only reads it).
    var fd: Int32 { file.rawValue }
    /// The path it was found at, symbolic links resolved.
    let path: String

    /// Where to look, in order, for a program at `executablePath`.
    static func candidates(executablePath: String, explicit: String?) -> [String] {
        if let explicit, !explicit.isEmpty { return [explicit] }
        let exe = SystemFiles.realPath(executablePath) ?? executablePath
        let directory = FilePaths.directory(of: exe)
        let prefix = directory == "/" ? "/" : FilePaths.directory(of: directory)
        var paths = [FilePaths.join(directory, name), FilePaths.join(FilePaths.join(prefix, installSubdirectory), name)]
        for prefix in ["/usr/local", "/usr"] {
            let path = FilePaths.join(FilePaths.join(prefix, installSubdirectory), name)
            if !paths.contains(path) { paths.append(path) }
        }
        return paths
    }

    /// Opens the first candidate that exists and passes the checks. A candidate that exists but
    /// fails them stops the search (a refused file is never silently passed over for another).
    static func locate(
        executablePath: String = PolicySearchPath.currentExecutable(),
        explicit: String? = getenv(variable).map { String(cString: $0) }
    ) throws(SandboxError) -> InitExecutable {
        let paths = candidates(executablePath: executablePath, explicit: explicit)
        var tried: [String] = []
        for path in paths {
            let opened: (fd: FileDescriptor, info: stat, path: String)
            do {
                opened = try TrustedPath.openFile(path)
            } catch .missing {
                tried.append("\(path) (missing)")
                continue
            } catch {
                throw SandboxError(
                    step: .initExec, errorNumber: EACCES,
                    detail: "cannot use the sandbox init \(path): \(error.withoutRule); \(rule)")
            }
            if let problem = TrustedPath.executableProblem(mode: opened.info.st_mode) {
                throw SandboxError(
                    step: .initExec, errorNumber: EACCES,
                    detail: "cannot use the sandbox init \(opened.path): it \(problem)")
            }
            return InitExecutable(file: opened.fd, path: opened.path)
        }
        throw SandboxError(
            step: .initExec, errorNumber: ENOENT,
            detail: "the sandbox init (\(name)) was not found; looked for \(tried.joined(separator: ", ")). "
                + "Build it with the package (`swift build --product \(name)`: it must sit next to the executable), "
                + "install extsandbox (scripts/install puts it in PREFIX/\(installSubdirectory)), or set \(variable) to its path")
    }

    static let rule =
        "the sandbox init and every directory above it must be owned by root or by you and not writable by group or others"
}
