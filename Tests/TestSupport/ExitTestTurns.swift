import Synchronization
import Testing

/// Runs each test case of a test or suite only while no other test so marked runs.
///
/// Swift Testing waits for an exit test's child process with blocking reads on the cooperative
/// pool (whatever the test's executor preference): two exit tests at once hold both of CI's two
/// pool threads for as long as their children run, and every other test's tasks (a launch's,
/// waiting for READY or an exit) wait meanwhile. Taking turns, exit tests block at most one
/// pool thread; the waiting for a turn suspends, it holds no thread.
public struct ExitTestTurnsTrait: TestTrait, SuiteTrait, TestScoping {
    public var isRecursive: Bool { true }

    public func scopeProvider(for test: Test, testCase: Test.Case?) -> Self? {
        testCase == nil ? nil : self
    }

    public func provideScope(for test: Test, testCase: Test.Case?,
                             performing function: @Sendable () async throws -> Void) async throws {
        await ExitTestTurns.shared.take()
        defer { ExitTestTurns.shared.pass() }
        try await function()
    }
}

extension Trait where Self == ExitTestTurnsTrait {
    /// An exit test: it runs while no other so marked does (see ``ExitTestTurnsTrait``).
    public static var oneExitTestAtATime: Self { Self() }
}

/// One turn, handed to the waiters in order.
final class ExitTestTurns: Sendable {
    static let shared = ExitTestTurns()

    private let state = Mutex<(taken: Bool, waiting: [CheckedContinuation<Void, Never>])>((false, []))

    func take() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let granted = state.withLock { state in
                if !state.taken {
                    state.taken = true
                    return true
                }
                state.waiting.append(continuation)
                return false
            }
            if granted { continuation.resume() }
        }
    }

    func pass() {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if state.waiting.isEmpty {
                state.taken = false
                return nil
            }
            return state.waiting.removeFirst()
        }
        next?.resume()
    }
}
