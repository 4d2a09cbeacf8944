import Dispatch
import Glibc
import Synchronization

extension AppExtensionProcess {
    /// Throws ``ExtensionError/blockingLaunchRefused`` when the calling thread runs a task and
    /// is not the main thread: the synchronous initializer must not block a pool thread.
    static func refuseBlockingInTask() throws(ExtensionError) {
        guard withUnsafeCurrentTask(body: { $0 != nil }), !isMainThread else { return }
        throw .blockingLaunchRefused
    }

    /// Whether this is the process's main thread (whose thread ID is the process ID).
    private static var isMainThread: Bool {
        var buffer = [CChar](repeating: 0, count: 64)
        let count = readlink("/proc/thread-self", &buffer, buffer.count - 1)
        guard count > 0 else { return false }
        let link = String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)  // "PID/task/TID"
        let parts = link.split(separator: "/")
        return parts.count == 3 && parts[0] == parts[2]
    }
}

/// The outcome of asynchronous work that a synchronous caller waits for, blocking its thread.
final class BlockingOutcome<Value: Sendable, Failure: Error>: Sendable {
    private let outcome = Mutex<Result<Value, Failure>?>(nil)
    private let done = DispatchSemaphore(value: 0)

    /// Sets the outcome (the first one counts) and wakes the waiter.
    func finish(_ result: Result<Value, Failure>) {
        outcome.withLock { $0 = $0 ?? result }
        done.signal()
    }

    /// Blocks until ``finish(_:)``; its value, or its error thrown.
    func wait() throws(Failure) -> Value {
        done.wait()
        guard let result = outcome.withLock({ $0 }) else { preconditionFailure("woken without an outcome") }
        return try result.get()
    }
}
