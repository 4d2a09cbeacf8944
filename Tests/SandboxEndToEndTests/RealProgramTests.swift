import Foundation
import TestSupport
import Testing

/// Ordinary programs keep working under the standard policy.
@Suite("Real programs under the standard policy")
struct RealProgramTests {
    @Test("a shell pipeline with sort")
    func shellPipeline() async throws {
        let result = try await Fixtures.exec(["/bin/sh", "-c", "i=0; while [ $i -lt 200 ]; do echo $i; i=$((i+1)); done | sort -rn | head -n 1"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == "199\n")
    }

    @Test("gzip and tar in /tmp")
    func gzipTar() async throws {
        let script = """
            set -e; cd /tmp; mkdir d; echo payload > d/file; tar czf d.tgz d; rm -r d
            tar xzf d.tgz; cat d/file; echo text | gzip | gzip -d
            """
        let result = try await Fixtures.exec(["/bin/sh", "-c", script])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == "payload\ntext\n")
    }

    @Test("sqlite3")
    func sqlite() async throws {
        let result = try await Fixtures.exec(["/usr/bin/sqlite3", "/tmp/db", "create table t(x); insert into t values (42); select x * 2 from t;"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == "84\n")
    }

    @Test("python3 with threads, subprocess, multiprocessing and temp files", arguments: Fixtures.Caller.allCases)
    func python(caller: Fixtures.Caller) async throws {
        let script = """
            import threading, subprocess, multiprocessing, tempfile
            out = []
            t = threading.Thread(target=lambda: out.append("thread")); t.start(); t.join()
            out.append(subprocess.run(["/bin/echo", "subprocess"], capture_output=True, text=True).stdout.strip())
            def square(x): return x * x
            if __name__ == "__main__":
                with multiprocessing.Pool(2) as pool: out.append(str(sum(pool.map(square, range(10)))))
                with tempfile.NamedTemporaryFile("w+") as f:
                    f.write("temp"); f.flush(); f.seek(0); out.append(f.read())
                print(" ".join(out))
            """
        let result = try await Fixtures.exec(["/usr/bin/python3", "-c", script], as: caller)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == "thread subprocess 285 temp\n", "\(result.stderr)")
    }

    @Test("exit codes pass through", arguments: [0, 3, 42, 255])
    func exitCodes(code: Int) async throws {
        let result = try await Fixtures.exec([Fixtures.probe, "exit", "\(code)"])
        #expect(result.status == Int32(code))
    }

    @Test("a crash exits with 128 + SIGSEGV")
    func crash() async throws {
        let result = try await Fixtures.exec([Fixtures.probe, "crash"])
        #expect(result.status == 128 + SIGSEGV)
    }

    @Test("--env, --ro-bind and --chdir")
    func options() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("xsb-bind-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        try "bound\n".write(to: dir.appendingPathComponent("file"), atomically: true, encoding: .utf8)
        chmod(dir.path, 0o755)
        chmod(dir.appendingPathComponent("file").path, 0o644)
        let result = try await Fixtures.exec(
            ["/bin/sh", "-c", "cat file; echo $GREETING; touch x 2>/dev/null || echo read-only"],
            options: ["--ro-bind", "\(dir.path):/work", "--chdir", "/work", "--env", "GREETING=hi"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == "bound\nhi\nread-only\n")
    }

    @Test("--help explains every option")
    func help() async throws {
        let result = try await Fixtures.run([Fixtures.cli, "exec", "--help"])
        for option in ["--policy", "--ro-bind", "--bind", "--env", "--chdir", "Exit status"] {
            #expect(result.stdout.contains(option), "missing \(option)")
        }
    }
}

@Suite("Audit mode")
struct AuditTests {
    @Test("--audit allows what the policy would kill and lists it at exit")
    func audit() async throws {
        let result = try await Fixtures.exec([Fixtures.probe, "ptrace"], options: ["--audit"])
        // ptrace ran (the probe calls that an escape), the rest of the sandbox did not change.
        #expect(result.status == 1, "\(result.stdout) \(result.stderr)")
        #expect(result.stderr.contains("audit: the policy 'standard' would have denied: ptrace"), "\(result.stderr)")
        let clean = try await Fixtures.exec(["/bin/sh", "-c", "echo fine"], options: ["--audit"])
        #expect(clean.stdout == "fine\n")
        #expect(clean.stderr.contains("would have denied nothing"), "\(clean.stderr)")
    }

    @Test("audit mode keeps the rest of the isolation")
    func auditKeepsIsolation() async throws {
        let result = try await Fixtures.exec([Fixtures.probe, "caps"], options: ["--audit"])
        #expect(result.status == 0, "\(result.stdout)")
    }
}
