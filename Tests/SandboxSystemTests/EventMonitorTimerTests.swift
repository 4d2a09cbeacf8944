import Glibc
@testable import SandboxSystem
import Synchronization
import Testing
import TestSupport

/// `EventMonitor.addTimer(milliseconds:handler:)`: a deadline as one more event of the monitor
/// thread (a launch's setup timeout).
@Suite("Event monitor timers", .offThePool)
struct EventMonitorTimerTests {
    /// CPU time the monitor's thread has used.
    static func cpuSeconds(of monitor: EventMonitor) -> Double {
        var clock = clockid_t()
        guard pthread_getcpuclockid(pthread_t(monitor.monitorThread.load(ordering: .relaxed)), &clock) == 0 else { return -1 }
        var time = timespec()
        clock_gettime(clock, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    @Test("a timer's handler runs once, after its time, and the monitor thread stays idle afterwards")
    func firesOnce() throws {
        let monitor = try EventMonitor()
        let fired = Atomic<Int>(0)
        let start = ContinuousClock.now
        let timer = try monitor.addTimer(milliseconds: 50) { fired.add(1, ordering: .relaxed) }
        #expect(EventMonitorTests.waitUntil { fired.load(ordering: .relaxed) == 1 })
        #expect(ContinuousClock.now - start >= .milliseconds(50))
        // A level-triggered watch of a timerfd nobody read would call the handler in a loop.
        let cpuBefore = Self.cpuSeconds(of: monitor)
        usleep(300_000)
        let spent = Self.cpuSeconds(of: monitor) - cpuBefore
        #expect(fired.load(ordering: .relaxed) == 1)
        #expect(spent < 0.1, "the monitor thread used \(spent) s of CPU while the expired timer was still registered")
        timer.cancel()
    }

    @Test("a cancelled timer never runs, its descriptor is closed, and cancelling again does nothing")
    func cancelled() throws {
        let monitor = try EventMonitor()
        let fired = Atomic<Int>(0)
        let timer = try monitor.addTimer(milliseconds: 100) { fired.add(1, ordering: .relaxed) }
        // Its own descriptor, not the process's count of them: other tests open and close theirs
        // meanwhile.
        #expect(timer.descriptor.isOpen && fcntl(timer.descriptor.rawValue, F_GETFD) >= 0)
        timer.cancel()
        #expect(!timer.descriptor.isOpen)
        timer.cancel()
        usleep(250_000)
        #expect(fired.load(ordering: .relaxed) == 0)
    }
}
