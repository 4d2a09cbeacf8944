import Glibc
@testable import SandboxSystem
import Testing

/// How `DetachedThread` names its threads: with prctl, never through /proc. A thread named by
/// writing /proc/thread-self/comm leaves dentries under /proc/PID/task/TID, and when the process
/// exits, whoever reaps it waits in the kernel for the exiting thread's flush of them (the parent
/// of every one-shot `extsandbox exec`).
@Suite("Detached threads")
struct DetachedThreadTests {
    @Test("A thread started with a name has that name, cut to 15 bytes")
    func namedThread() async throws {
        let name = await withCheckedContinuation { (continuation: CheckedContinuation<String, Never>) in
            do {
                try DetachedThread.start(name: "xsb-test-a-long-thread-name") {
                    continuation.resume(returning: DetachedThread.nameOfThisThread())
                }
            } catch {
                continuation.resume(returning: "pthread_create: \(error)")
            }
        }
        #expect(name == "xsb-test-a-long")
    }

    /// The thread moves its root to an empty directory (its own, after unshare(CLONE_FS)), where
    /// /proc/thread-self does not exist: a name that needs /proc is not set there.
    @Test("A thread names itself without /proc", .enabled(if: geteuid() == 0, "chroot needs root"))
    func namingNeedsNoProc() async throws {
        var template = Array("/tmp/xsb-empty-root-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!).map { String(cString: $0) } }
        let emptyRoot = try #require(made)
        defer { rmdir(emptyRoot) }

        let outcome = await withCheckedContinuation { (continuation: CheckedContinuation<String, Never>) in
            do {
                try DetachedThread.start(name: nil) {
                    // CLONE_FS: this thread's root and working directory become its own, so the
                    // chroot below changes nothing for the test process's other threads.
                    guard Self.unshare(0x0000_0200 /* CLONE_FS */) == 0 else {
                        return continuation.resume(returning: "unshare(CLONE_FS): errno \(errno)")
                    }
                    guard chroot(emptyRoot) == 0, chdir("/") == 0 else {
                        return continuation.resume(returning: "chroot: errno \(errno)")
                    }
                    guard access("/proc/thread-self/comm", F_OK) != 0 else {
                        return continuation.resume(returning: "/proc is still visible")
                    }
                    DetachedThread.nameThisThread("xsb-no-proc")
                    continuation.resume(returning: DetachedThread.nameOfThisThread())
                }
            } catch {
                continuation.resume(returning: "pthread_create: \(error)")
            }
        }
        #expect(outcome == "xsb-no-proc")
    }

    /// unshare(2), which Swift's Glibc does not declare (it needs _GNU_SOURCE).
    static func unshare(_ flags: Int32) -> Int32 {
        typealias Unshare = @convention(c) (Int32) -> Int32
        guard let symbol = dlsym(nil, "unshare") else { return -1 }
        return unsafeBitCast(symbol, to: Unshare.self)(flags)
    }
}
