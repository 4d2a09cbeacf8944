import ExtSandboxExtension
import Glibc
import TextFilterContract

/// Test fixture: an extension built with the SDK that exports a ``TextFilter`` on every connection.
@main
struct ActorsExtension: AppExtension {
    init() {
        TextFilterContract.register()
    }

    func exportedObject(_ system: ExtensionActorSystem) -> ExportedObject? {
        ExportedObject(Filter(actorSystem: system), as: $TextFilter.self)
    }
}

struct PlainFailure: Error, CustomStringConvertible {
    var description: String { "the filter failed plainly" }
}

distributed actor Filter: TextFilter {
    typealias ActorSystem = ExtensionActorSystem
    private var cancelled = 0

    distributed func apply(_ text: String, options: FilterOptions) throws -> String {
        if let limit = options.limit, text.count > limit { throw FilterError.tooLong(limit: limit) }
        return options.shout ? text.uppercased() : text
    }

    distributed func sleep(milliseconds: Int) async -> Bool {
        do {
            try await Task.sleep(nanoseconds: UInt64(max(milliseconds, 0)) * 1_000_000)
            return false
        } catch {
            cancelled += 1
            return true
        }
    }

    distributed func failPlainly() throws {
        throw PlainFailure()
    }

    distributed func crash() {
        raise(SIGSEGV)
    }

    distributed func askHost(_ text: String) async throws -> String {
        guard let host = HostConnection.current else { return "no host connection" }
        return try await host.remoteObject($HostNotes.self).note(text)
    }

    distributed func cancelledSleeps() -> Int { cancelled }

    distributed func count(_ bytes: [UInt8]) -> Int { bytes.count }

    distributed func echo(_ bytes: [UInt8]) -> [UInt8] { bytes }

    distributed func size(of file: TransferredFileDescriptor) -> Int {
        var info = stat()
        guard let descriptor = file.rawValue, fstat(descriptor, &info) == 0 else { return -1 }
        return Int(info.st_size)
    }

    distributed func file(containing text: String) throws -> TransferredFileDescriptor {
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else { throw PlainFailure() }
        let reading = TransferredFileDescriptor(taking: ends[0])
        defer { close(ends[1]) }
        let bytes = Array(text.utf8)
        guard write(ends[1], bytes, bytes.count) == bytes.count else { throw PlainFailure() }
        return reading
    }
}
