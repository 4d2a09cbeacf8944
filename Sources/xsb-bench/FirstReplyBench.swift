import ExtSandbox
import Foundation
import SandboxRuntime

/// Launch to first reply through the host API: a new ``AppExtensionProcess`` of the SDK's echo
/// extension, a connection, a 64-byte request and its reply, timed from the handle's creation to
/// the reply. Warm samples launch from a pre-built sandbox
/// (``AppExtensionProcess/prepareWarmLaunches(of:count:)``, one kept and ready before each),
/// cold ones with none kept; the two alternate, and each process has ended before the next.
struct FirstReplyBench {
    let extensionPath: String
    let securityLevel: String

    func run(iterations: Int) async throws -> (warm: [Double], cold: [Double]) {
        let point = AppExtensionPoint(name: "xsb-bench.first-reply", securityLevel: securityLevel)
        let echo = AppExtensionIdentity.developmentOnly(bundleIdentifier: "xsb-bench.first-reply", executablePath: extensionPath, point: point)
        let message = ExtensionMessage([UInt8](repeating: UInt8(ascii: "x"), count: 64))
        func firstReply() async throws -> Double {
            let start = now()
            let process = try await AppExtensionProcess(configuration: .init(identity: echo))
            let connection = try await process.makeConnection()
            let reply = try await connection.send(message)
            let elapsed = now() - start
            guard reply.payload == message.payload else { fatalError("echo answered \(reply.payload.count) bytes") }
            connection.invalidate()
            process.invalidate()
            _ = await process.sandbox.waitForExit()
            return elapsed
        }
        _ = try await firstReply()  // the first launch opens what every later one reuses (the init, the policy)
        var warm: [Double] = [], cold: [Double] = []
        for _ in 0..<iterations {
            try await AppExtensionProcess.prepareWarmLaunches(of: echo, count: 1)
            warm.append(try await firstReply())
            await AppExtensionProcess.endWarmLaunches()
            // The refill the warm launch started is discarded when done: not beside the cold sample.
            while Supervisor.shared.poolStatus.building > 0 { try await Task.sleep(for: .milliseconds(1)) }
            cold.append(try await firstReply())
        }
        return (warm, cold)
    }
}
