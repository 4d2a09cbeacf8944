import Glibc
import SandboxExec
import SandboxSystem

/// `extsandbox-commands`, the CLI's every command but the common shapes of `exec`: ArgumentParser,
/// the extension catalog, the host API and their dependencies, which a one-shot `exec` would
/// otherwise load, relocate and scan at every start (docs/performance.md).
///
/// Looked for, in order, where `scripts/install` and the build put it:
/// - next to this executable, symbolic links resolved (the build directory; `PREFIX/bin` is not
///   its place, as it is not a command of its own);
/// - `PREFIX/libexec/extsandbox/extsandbox-commands`, PREFIX being the parent of this executable's
///   directory.
///
/// Each is opened only after ``TrustedPath``'s checks (owned by root or the caller, as is every
/// directory above it, none writable by group or others) and exec'd through that descriptor, as
/// the sandbox init is: the file that runs is the one that was checked.
enum CommandsExecutable {
    static let name = "extsandbox-commands"
    static let installSubdirectory = "libexec/extsandbox"

    /// Where to look, in order, for the commands of an `extsandbox` at `executablePath`.
    static func candidates(executablePath: String) -> [String] {
        let exe = SystemFiles.realPath(executablePath) ?? executablePath
        let directory = FilePaths.directory(of: exe)
        let prefix = directory == "/" ? "/" : FilePaths.directory(of: directory)
        return [FilePaths.join(directory, name), FilePaths.join(FilePaths.join(prefix, installSubdirectory), name)]
    }

    /// Replaces this process with the commands' executable, its arguments unchanged; returns only
    /// to exit after saying why it could not (125 for `exec`, as when its sandbox cannot be set
    /// up; 1 for any other command).
    static func become(arguments: [String]) -> Never {
        // Only the kernel's word for where this executable is: a relative argv[0] would make the
        // candidates relative to the current directory.
        guard let executable = SystemFiles.linkTarget("/proc/self/exe") else {
            fail("cannot find \(name): /proc/self/exe cannot be read (is /proc mounted?)", arguments)
        }
        var tried: [String] = []
        for path in candidates(executablePath: executable) {
            let opened: (fd: FileDescriptor, info: stat, path: String)
            do {
                opened = try TrustedPath.openFile(path)
            } catch .missing {
                tried.append(path)
                continue
            } catch {
                fail("cannot use \(path): \(error.withoutRule); \(rule)", arguments)
            }
            if let problem = TrustedPath.executableProblem(mode: opened.info.st_mode) {
                fail("cannot use \(opened.path): it \(problem)", arguments)
            }
            // The arguments as the kernel gave them: `CommandLine.arguments` would have replaced
            // bytes that are not UTF-8.
            fexecve(opened.fd.rawValue, CommandLine.unsafeArgv, environ)
            fail("cannot run \(opened.path): \(Errno(errno))", arguments)
        }
        fail("\(name) was not found (looked for \(tried.joined(separator: " and "))); "
             + "scripts/install puts it in PREFIX/\(installSubdirectory), the build next to extsandbox", arguments)
    }

    static let rule = "\(name) and every directory above it must be owned by root or by you and not writable by group or others"

    private static func fail(_ message: String, _ arguments: [String]) -> Never {
        printError(message)
        exit(arguments.dropFirst().first == "exec" ? 125 : 1)
    }
}
