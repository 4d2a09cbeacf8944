import CMechanismSupport
import Glibc
import Testing

/// fds.c: the payload's fds at 0, 1, 2, 3… (everything else close-on-exec), the init keeping
/// only what it names, the clone child placing the init's fds. Each case starts a forked child
/// from a table holding only memfds (its sources) at numbers the case chooses.
@Suite("File descriptors: placed, kept, closed")
struct FileDescriptorTests {
    static let devNull = Int32(XSBT_FD_DEV_NULL)

    struct Arrangement: Sendable, CustomTestStringConvertible {
        let testDescription: String
        /// Where the sources are open (source i at sources[i]).
        let sources: [Int32]
        var script: Int32 = -1
        let stdio: [Int32]
        var extra: [Int32] = []
        var exec: Int32 = -1
        /// Every fd the program keeps across its exec, and what it is (a source's index or /dev/null).
        let kept: [Int32: Int32]
        /// xsb_payload_arrange_fds's result: the fd to exec by, or -1.
        var result: Int32 = -1
        /// The program's fd when it is exec'd by a close-on-exec copy (a binary).
        var program: Int32? = nil
    }

    static func fdCase(sources: [Int32], script: Int32 = -1, stdio: [Int32] = [-1, -1, -1], extra: [Int32] = [], exec: Int32 = -1) -> xsbt_fd_case {
        var setup = xsbt_fd_case()
        withUnsafeMutableBytes(of: &setup.source_fds) { raw in for (i, fd) in sources.enumerated() { raw.storeBytes(of: fd, toByteOffset: 4 * i, as: Int32.self) } }
        setup.source_count = Int32(sources.count)
        setup.script_source = script
        setup.stdio = (stdio[0], stdio[1], stdio[2])
        withUnsafeMutableBytes(of: &setup.extra_fds) { raw in for (i, fd) in extra.enumerated() { raw.storeBytes(of: fd, toByteOffset: 4 * i, as: Int32.self) } }
        setup.extra_fd_count = Int32(extra.count)
        setup.exec_fd = exec
        return setup
    }

    static let arrangements: [Arrangement] = [
        Arrangement(testDescription: "stdio and an extra fd, each from another's target", sources: [0, 1, 2, 3], stdio: [2, 0, 1], extra: [3],
                    kept: [0: 2, 1: 0, 2: 1, 3: 3]),
        // Without the move above every target first, placing 3 at 0 would overwrite the source at 0
        // before it reaches 2 and 3.
        Arrangement(testDescription: "a source on a target placed before it is read", sources: [3, 4, 0], stdio: [3, 4, 0], extra: [0],
                    kept: [0: 0, 1: 1, 2: 2, 3: 2]),
        Arrangement(testDescription: "-1 is /dev/null", sources: [5], stdio: [-1, 5, -1], kept: [0: devNull, 1: 0, 2: devNull]),
        Arrangement(testDescription: "one fd as all three", sources: [7], stdio: [7, 7, 7], kept: [0: 0, 1: 0, 2: 0]),
        Arrangement(testDescription: "high sources, nothing left below", sources: [40, 41, 42, 43, 44], stdio: [40, 41, 42], extra: [43, 44],
                    kept: [0: 0, 1: 1, 2: 2, 3: 3, 4: 4]),
        // A binary is exec'd by a close-on-exec copy above the moved sources (64, 65, 66).
        Arrangement(testDescription: "a binary program stays close-on-exec", sources: [0, 1, 2, 3], stdio: [0, 1, 2], exec: 3,
                    kept: [0: 0, 1: 1, 2: 2], result: 67, program: 3),
        // A script's interpreter reads it as /dev/fd/N: it stays open right after the payload's fds.
        Arrangement(testDescription: "a script stays open after the payload's fds", sources: [0, 1, 2, 9], script: 3, stdio: [0, 1, 2], extra: [1], exec: 9,
                    kept: [0: 0, 1: 1, 2: 2, 3: 1, 4: 3], result: 4),
    ]

    @Test("the payload's fds", arguments: arrangements)
    func arranged(_ arrangement: Arrangement) throws {
        var setup = Self.fdCase(sources: arrangement.sources, script: arrangement.script, stdio: arrangement.stdio, extra: arrangement.extra, exec: arrangement.exec)
        let out = try outcome { xsbt_arrange_payload_fds(&setup, $0) }
        try #require(out.ranThrough, "\(out.failure)")
        #expect(out.result == arrangement.result)
        let slots = out.slots
        for (fd, slot) in slots.enumerated() {
            if let what = arrangement.kept[Int32(fd)] {
                #expect(slot.what == what && slot.cloexec == 0, "fd \(fd): \(slot)")
            } else if slot.what != XSBT_FD_CLOSED {
                #expect(slot.cloexec == 1, "fd \(fd) (\(slot.what)) would reach the program")
            }
        }
        if let program = arrangement.program {
            #expect(slots[Int(arrangement.result)].what == program && slots[Int(arrangement.result)].cloexec == 1)
        }
    }

    struct Failure: Sendable, CustomTestStringConvertible {
        let testDescription: String
        let stdio: [Int32]
        var exec: Int32 = -1
        let detail: String
    }

    @Test("an fd that is not open fails the step, naming what", arguments: [
        Failure(testDescription: "stdio", stdio: [40, -1, -1], detail: "dup"),
        Failure(testDescription: "the program", stdio: [-1, -1, -1], exec: 41, detail: "dup of the program"),
    ])
    func notOpen(_ failure: Failure) throws {
        var setup = Self.fdCase(sources: [], stdio: failure.stdio, exec: failure.exec)
        let out = try outcome { xsbt_arrange_payload_fds(&setup, $0) }
        #expect(out.failed(at: XSB_STEP_FILE_DESCRIPTORS) && out.failed_errno == EBADF && out.detail == failure.detail, "\(out.failure)")
    }

    /// The open fds of a snapshot, and what each is.
    static func open(_ out: xsbt_outcome) -> [Int32: Int32] {
        var open: [Int32: Int32] = [:]
        for (fd, slot) in out.slots.enumerated() where slot.what != XSBT_FD_CLOSED { open[Int32(fd)] = slot.what }
        return open
    }

    @Test("the init keeps exactly the fds it names (unsorted, repeated, -1 ignored)", arguments: [
        ([9, 3, -1, 70, 3], [3: 1, 9: 3, 70: 4]),
        ([0], [0: 0]),
        ([5, 0], [0: 0, 5: 2]),
        ([], [:]),
    ] as [([Int32], [Int32: Int32])])
    func keepOnly(keep: [Int32], open: [Int32: Int32]) throws {
        var setup = Self.fdCase(sources: [0, 3, 5, 9, 70])
        let out = try outcome { xsbt_keep_only(&setup, keep, Int32(keep.count), $0) }
        try #require(out.ranThrough, "\(out.failure)")
        #expect(Self.open(out) == open)
    }

    @Test("the init's fds: control socket, description, passed fds, then the init itself close-on-exec; nothing else")
    func initPlacement() throws {
        // control 5, description 0, passed 1, 2, 7, init 3: most sit on another's target.
        var setup = Self.fdCase(sources: [5, 0, 1, 2, 7, 3])
        let out = try outcome { xsbt_place_init_fds(&setup, $0) }
        try #require(out.ranThrough, "\(out.failure) \(out.report)")
        #expect(out.result == 5, "the init's fd")
        #expect(Self.open(out) == [0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 5])
        #expect(out.slots.prefix(6).map(\.cloexec) == [0, 0, 0, 0, 0, 1])

        var bare = Self.fdCase(sources: [9, 8, 7])
        let none = try outcome { xsbt_place_init_fds(&bare, $0) }
        try #require(none.ranThrough, "\(none.failure) \(none.report)")
        #expect(none.result == 2)
        #expect(Self.open(none) == [0: 0, 1: 1, 2: 2])
        #expect(none.slots.prefix(3).map(\.cloexec) == [0, 0, 1])
    }
}
