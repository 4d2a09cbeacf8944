import DockerProfileImport
import Foundation
import Testing
import TestSupport
@testable import PolicyTools
@testable import SandboxPolicy

/// A real Docker/OCI seccomp profile and what its imported policy must do with sockets.
struct RealProfile: Sendable, CustomTestStringConvertible {
    var label: String
    var path: String
    /// A Python statement that must print "ok" under the imported policy.
    var socketCheck: String
    var testDescription: String { label }
}

let dockerFixtures = URL(fileURLWithPath: TestPaths.fixturesDirectory).appendingPathComponent("docker-seccomp")
/// Podman's profile as Debian ships it (/usr/share/containers/seccomp.json), kept with the tests
/// so that they need no package (docker-seccomp/README.md says where it comes from).
let containersCommonProfile = dockerFixtures.appendingPathComponent("containers-common-seccomp.json").path

/// The audit netlink socket fails with EINVAL, every other socket is allowed.
let auditSocketCheck = """
    import errno, socket
    try: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 9)
    except OSError as e: assert e.errno == errno.EINVAL, e
    else: raise SystemExit("an audit socket was created")
    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close()
    print("ok")
    """

let realProfiles = [
    RealProfile(label: "Podman's profile (containers-common)", path: containersCommonProfile, socketCheck: auditSocketCheck),
    RealProfile(label: "a profile with the same structures", path: dockerFixtures.appendingPathComponent("containers-style.json").path,
                socketCheck: auditSocketCheck),
]

/// Real profiles, imported by the built CLI: they load, pass `policy check`, and run a shell,
/// python3 and sqlite3 in a real sandbox.
@Suite("import-docker with real profiles", .offThePool)
struct RealDockerProfileTests {
    @Test(arguments: realProfiles)
    func importsChecksAndRunsPrograms(_ profile: RealProfile) async throws {
        let imported = try await PolicyCLITests.run(["policy", "import-docker", profile.path])
        #expect(imported.status == 0, "\(imported.stderr)")
        #expect(!imported.stderr.contains("does not load"), "\(imported.stderr)")
        let file = try TestPaths.makePolicyDirectory("docker-import").appendingPathComponent("imported.yaml")
        try imported.stdout.write(to: file, atomically: true, encoding: .utf8)

        let check = try await PolicyCLITests.run(["policy", "check", file.path])
        #expect(check.status == 0, "\(check.stdout)\(check.stderr)")
        #expect(check.stdout.hasPrefix("\(file.path): ok ("), "\(check.stdout)")

        func exec(_ argv: [String]) async throws -> Fixtures.Output {
            try await PolicyCLITests.run(["exec", "--policy", file.path, "--"] + argv)
        }
        let shell = try await exec(["/bin/sh", "-c", "i=0; while [ $i -lt 50 ]; do echo $i; i=$((i+1)); done | sort -rn | head -n 1"])
        #expect(shell.status == 0 && shell.stdout == "49\n", "\(shell.stdout)\(shell.stderr)")

        let python = try await exec(["/usr/bin/python3", "-c", """
            import threading, subprocess, tempfile
            out = []
            t = threading.Thread(target=lambda: out.append("thread")); t.start(); t.join()
            out.append(subprocess.run(["/bin/echo", "subprocess"], capture_output=True, text=True).stdout.strip())
            with tempfile.NamedTemporaryFile("w+") as f:
                f.write("temp"); f.flush(); f.seek(0); out.append(f.read())
            print(" ".join(out))
            """])
        #expect(python.status == 0 && python.stdout == "thread subprocess temp\n", "\(python.stdout)\(python.stderr)")

        let sockets = try await exec(["/usr/bin/python3", "-c", profile.socketCheck])
        #expect(sockets.status == 0 && sockets.stdout == "ok\n", "\(sockets.stdout)\(sockets.stderr)")

        let sqlite = try await exec(["/usr/bin/sqlite3", "/tmp/db", "create table t(x); insert into t values (42); select x * 2 from t;"])
        #expect(sqlite.status == 0 && sqlite.stdout == "84\n", "\(sqlite.stdout)\(sqlite.stderr)")
    }

    @Test func thePackagedProfileKeepsItsSocketRules() throws {
        // The rules that made the import fail before several actions per system call: an errno
        // rule and allow rules under other conditions, one policy for socket.
        let output = try DockerProfileImporter.convert(
            json: try Data(contentsOf: URL(fileURLWithPath: containersCommonProfile)), source: containersCommonProfile)
        #expect(!output.warnings.contains { $0.contains("does not load") }, "\(output.warnings)")
        let policy = try PolicyLoader.load(yaml: output.yaml, name: "containers")
        let socketRules = policy.seccomp.rules.filter { $0.syscall == "socket" }
        #expect(socketRules.map(\.action) == [.errno(22), .allow, .allow], "one rule per distinct entry, strongest first")
        let filter = try policy.compileSeccompFilter(mode: .supervised)
        let socket = Syscalls.number(of: "socket")!
        #expect(filter.evaluate(syscall: socket, arguments: [16, 3, 9]) == SeccompReturn.errno | 22)  // NETLINK_AUDIT
        #expect(filter.evaluate(syscall: socket, arguments: [16, 3, 0]) == SeccompReturn.allow)
        #expect(filter.evaluate(syscall: socket, arguments: [2, 1, 9]) == SeccompReturn.allow)
        #expect(filter.evaluate(syscall: Syscalls.number(of: "mount")!, arguments: []) == SeccompReturn.errno | 38)
    }

    /// Podman's profile is no Docker profile, and it lists some sub-architectures under two
    /// architectures: the import names the format, not Docker, and each architecture once.
    @Test func thePackagedProfileIsNamedForItsFormatWithEachArchitectureOnce() throws {
        let yaml = try DockerProfileImporter.convert(
            json: try Data(contentsOf: URL(fileURLWithPath: containersCommonProfile)), source: containersCommonProfile).yaml
        #expect(yaml.hasPrefix("# Imported from the OCI seccomp profile \(containersCommonProfile)\n"), "\(yaml.prefix(300))")
        #expect(!yaml.contains("Docker seccomp profile") && !yaml.contains("Docker profile"), "\(yaml.prefix(600))")
        let line = try #require(yaml.split(separator: "\n").first { $0.contains("architectures ") && $0.contains("are not imported") })
        let names = line.split(separator: " ").filter { $0.hasPrefix("SCMP_ARCH_") }.map { $0.trimmingCharacters(in: [","]) }
        #expect(names.contains("SCMP_ARCH_MIPS64") && names.count == Set(names).count, "\(line)")
    }

    @Test func overlappingRulesOfAProfileKeepTheStrongestAction() throws {
        let output = try DockerProfileImporter.convert(
            json: try Data(contentsOf: dockerFixtures.appendingPathComponent("containers-style.json")), source: "containers-style.json")
        let filter = try PolicyLoader.load(yaml: output.yaml, name: "t").compileSeccompFilter(mode: .inKernel)
        let socket = Syscalls.number(of: "socket")!
        #expect(filter.evaluate(syscall: socket, arguments: [17, 3, 0]) == SeccompReturn.killProcess)  // AF_PACKET: kill beats allow
        #expect(filter.evaluate(syscall: socket, arguments: [16, 3, 9]) == SeccompReturn.errno | 22)
        #expect(filter.evaluate(syscall: socket, arguments: [10, 1, 0]) == SeccompReturn.allow)
        #expect(filter.evaluate(syscall: Syscalls.number(of: "chroot")!, arguments: []) == SeccompReturn.errno | 1)
    }
}
