import SandboxSystem
import Synchronization

/// A progress line on a terminal while a check takes over a second (never when standard output
/// is not a terminal, nor with --json).
final class ConformanceProgress: Sendable {
    private struct State {
        var name: String?
        var started = ContinuousClock.now
        var drawn = false
        var ticker: Task<Void, Never>?
    }

    private let enabled: Bool
    private let state = Mutex(State())

    init(enabled: Bool) {
        self.enabled = enabled
        guard enabled else { return }
        let ticker = Task { [weak self] in
            let frames = ["|", "/", "-", "\\"]
            var frame = 0
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(100))
                frame += 1
                self?.draw(frames[frame % frames.count])
            }
        }
        state.withLock { $0.ticker = ticker }
    }

    private func draw(_ glyph: String) {
        state.withLock { state in
            guard let name = state.name else { return }
            let elapsed = ContinuousClock.now - state.started
            guard elapsed >= .seconds(1) else { return }
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            let tenths = Int(seconds * 10)
            writeAll(1, Array("\r\u{1B}[2K  \(glyph) \(name) (\(tenths / 10).\(tenths % 10) s)".utf8))
            state.drawn = true
        }
    }

    func begin(_ name: String) {
        guard enabled else { return }
        state.withLock {
            $0.name = name
            $0.started = .now
        }
    }

    /// Clears the line before the check's result is printed.
    func end() {
        guard enabled else { return }
        state.withLock { state in
            state.name = nil
            if state.drawn { writeAll(1, Array("\r\u{1B}[2K".utf8)) }
            state.drawn = false
        }
    }

    func stop() {
        end()
        state.withLock { $0.ticker?.cancel() }
    }
}
