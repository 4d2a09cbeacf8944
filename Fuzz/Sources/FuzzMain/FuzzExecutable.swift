import ExtSandboxFuzzing
import FuzzDriver
import Glibc
import Synchronization

/// A libFuzzer executable for one ``FuzzTarget``; its whole source is
/// `@main struct PayloadsFuzzer: FuzzExecutable { static let target = FuzzTarget.payloads }`.
///
/// The compiler names the `@main` entry point `<module>_main` (SwiftPM renames every executable's
/// `main` so on Linux), and ``main()`` hands the process over to libFuzzer's driver. The one
/// `LLVMFuzzerTestOneInput` below serves every executable: it runs the target `main` chose.
public protocol FuzzExecutable {
    /// The fuzz target this executable runs.
    static var target: FuzzTarget { get }
}

extension FuzzExecutable {
    /// Chooses ``target`` and runs libFuzzer's driver over it with the process's arguments.
    public static func main() {
        chosenTarget.withLock { $0 = target }
        exit(xsb_fuzz_main(CommandLine.argc, CommandLine.unsafeArgv))
    }
}

/// The executable's target: set once by ``FuzzExecutable/main()``, before the driver starts.
private let chosenTarget = Mutex<FuzzTarget?>(nil)

/// libFuzzer's entry point: one input per call, through the executable's target.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let target = chosenTarget.withLock({ $0 }) else { fatalError("no fuzz target chosen: start through FuzzExecutable.main") }
    target.run(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}
