import DockerProfileImport
import Foundation
import Testing
import TestSupport
@testable import PolicyTools
@testable import SandboxPolicy

/// A small but realistic Docker/OCI seccomp profile, in the shape of moby's default profile (a
/// fixture the CLI's import-docker test reads too).
func dockerProfileJSON() throws -> String {
    try String(contentsOfFile: TestPaths.dockerSampleProfile, encoding: .utf8)
}

@Suite("import-docker", .offThePool)
struct DockerImportTests {
    @Test func convertsAProfileThatLoadsAndCompiles() throws {
        let output = try DockerProfileImporter.convert(json: Data(try dockerProfileJSON().utf8), source: "/etc/docker/seccomp.json")
        let yaml = output.yaml
        #expect(yaml.hasPrefix("# Imported from the OCI seccomp profile /etc/docker/seccomp.json\n"))
        #expect(yaml.contains("  default: errno EPERM\n"))
        #expect(yaml.contains("    # what every program needs\n    - accept4\n"))
        #expect(yaml.contains("not x86_64 system calls, skipped: _llseek, chown32"))
        #expect(yaml.contains("clone3 is not imported"))
        #expect(yaml.contains("architectures SCMP_ARCH_X86, SCMP_ARCH_X32, SCMP_ARCH_AARCH64, SCMP_ARCH_ARM are not imported"))
        #expect(yaml.contains("syscalls[7] (mount, umount2, unshare) skipped: only for containers with CAP_SYS_ADMIN"))
        #expect(yaml.contains("syscalls[4] (clone) skipped: only for s390, s390x"))
        #expect(yaml.contains("    # - { syscall: ptrace, action: allow, why: \"…\" }"))
        #expect(yaml.contains("      when: [\"arg0 & 0x7e020000 == 0\"]"))
        #expect(output.warnings.contains { $0.contains("SCMP_ACT_NOTIFY has no equivalent") })
        #expect(output.warnings.contains { $0.contains("dangerous system calls the profile allows") && $0.contains("ptrace") })
        #expect(!output.warnings.contains { $0.contains("does not load") }, "\(output.warnings)")

        // Round trip: the imported policy loads, compiles and means what the profile meant.
        let policy = try PolicyLoader.load(yaml: yaml, name: "imported")
        let filter = try policy.compileSeccompFilter(mode: .inKernel)
        _ = try policy.compileSeccompFilter(mode: .supervised)
        func eval(_ name: String, _ args: [UInt64] = []) -> UInt32 {
            filter.evaluate(syscall: Syscalls.number(of: name)!, arguments: args)
        }
        let eperm = SeccompReturn.errno | 1
        #expect(eval("read") == SeccompReturn.allow)
        #expect(eval("execve") == SeccompReturn.allow)
        #expect(eval("socket", [2, 1]) == SeccompReturn.allow)  // AF_INET
        #expect(eval("socket", [40, 1]) == eperm)  // AF_VSOCK
        #expect(eval("personality", [8]) == SeccompReturn.allow)
        #expect(eval("personality", [1]) == eperm)
        #expect(eval("clone", [0x3d0f00]) == SeccompReturn.allow)
        #expect(eval("clone", [0x3d0f00 | 0x1000_0000]) == eperm)  // CLONE_NEWUSER
        #expect(eval("chmod") == SeccompReturn.errno | 13)
        #expect(eval("fchmodat") == SeccompReturn.errno | 13)
        #expect(eval("kexec_load") == SeccompReturn.killProcess)
        #expect(eval("ptrace") == eperm)  // until an admin writes why
        #expect(eval("mount") == eperm)
        #expect(eval("sync") == eperm)
        #expect(eval("clone3") == SeccompReturn.errno | 38)
    }

    @Test func aDefaultAllowProfileGetsTheDangerousCallsDenied() throws {
        let json = """
            { "defaultAction": "SCMP_ACT_ALLOW",
              "syscalls": [ { "names": ["reboot", "ptrace"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1 } ] }
            """
        let output = try DockerProfileImporter.convert(json: Data(json.utf8), source: "allow.json")
        let policy = try PolicyLoader.load(yaml: output.yaml, name: "imported")
        let filter = try policy.compileSeccompFilter(mode: .inKernel)
        #expect(filter.evaluate(syscall: Syscalls.number(of: "bpf")!, arguments: []) == SeccompReturn.errno | 1)
        #expect(filter.evaluate(syscall: Syscalls.number(of: "read")!, arguments: []) == SeccompReturn.allow)
        #expect(output.warnings.contains { $0.contains("the dangerous system calls it does not name fail with EPERM") })
    }

    @Test func brokenInputIsAClearError() {
        #expect { try DockerProfileImporter.convert(json: Data("{".utf8), source: "x.json") } throws: {
            "\($0)".hasPrefix("x.json: not valid JSON")
        }
        #expect { try DockerProfileImporter.convert(json: Data("{\"syscalls\": []}".utf8), source: "x.json") } throws: {
            "\($0)".contains("a profile needs \"defaultAction\"")
        }
    }

    @Test func hostileValuesNeitherCrashNorInjectKeys() throws {
        // An argument index of -1 (UInt64.max as a 64-bit pattern), and a name with a newline
        // that would start a key of its own if it reached the output unchanged.
        let json = """
            { "defaultAction": "SCMP_ACT_ERRNO",
              "syscalls": [
                { "names": ["read"], "action": "SCMP_ACT_ALLOW", "args": [ { "index": -1, "value": 1, "op": "SCMP_CMP_EQ" } ] },
                { "names": ["nosuch\\nnetwork: host"], "action": "SCMP_ACT_ALLOW" } ] }
            """
        let output = try DockerProfileImporter.convert(json: Data(json.utf8), source: "evil\nname.json")
        #expect(output.warnings.contains { $0.contains("without a valid index") })
        #expect(!output.yaml.split(separator: "\n").contains { $0.hasPrefix("network: host") })
        #expect(!output.yaml.split(separator: "\n").contains { $0 == "name.json" })
    }

    @Test func controlCharactersFromTheProfileKeepTheOutputReadable() throws {
        // Found by fuzzing (docker-import): DEL and the C1 control characters are not allowed
        // anywhere in a YAML file, comments included. Copied from the profile into a comment (or
        // from the file name into the description), one made the whole imported policy unreadable.
        let json = try dockerProfileJSON()
            .replacingOccurrences(of: "SCMP_ARCH_AARCH64", with: "SCMP_ARCH_\u{7f}AARCH64")
            .replacingOccurrences(of: "what every program needs", with: "what every\u{9f}\\u0001 program needs")
        let output = try DockerProfileImporter.convert(json: Data(json.utf8), source: "/etc/odd\u{80}\u{7f}.json")
        #expect(!output.warnings.contains { $0.contains("does not load") }, "\(output.warnings)")
        #expect(PolicyLoader.check(yaml: output.yaml, name: "imported").isEmpty)
    }
}
