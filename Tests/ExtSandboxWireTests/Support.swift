import Foundation
import Glibc
import Testing
import TestSupport
@testable import ExtSandboxWire

/// The repository root (found by TestSupport's one finder).
let repositoryRoot: String = TestPaths.packageRoot.path

/// A descriptor whose closing can be observed without racing other tests for fd numbers: the
/// write end of a pipe. Once every copy of it is closed, the read end sees end of file.
struct Probe {
    let readEnd: Int32
    let writeEnd: Int32

    init() {
        var fds: [Int32] = [-1, -1]
        precondition(pipe(&fds) == 0)
        readEnd = fds[0]
        writeEnd = fds[1]
        _ = fcntl(readEnd, F_SETFD, FD_CLOEXEC)
        _ = fcntl(writeEnd, F_SETFD, FD_CLOEXEC)
        _ = fcntl(readEnd, F_SETFL, O_NONBLOCK)
    }

    /// Whether every copy of the write end is closed.
    var isClosed: Bool {
        var byte: UInt8 = 0
        return read(readEnd, &byte, 1) == 0
    }

    /// Whether every copy is closed within a few seconds: tests in this process run in parallel,
    /// and a process forked meanwhile holds copies of every descriptor until it closes or execs.
    var becomesClosed: Bool {
        for _ in 0..<300 {
            if isClosed { return true }
            usleep(10_000)
        }
        return false
    }

    func dispose() {
        close(readEnd)
    }
}

/// A memfd with `size` bytes, via dlsym (Glibc's module does not export memfd_create).
func makeMemfd(size: Int) -> Int32 {
    typealias MemfdCreate = @convention(c) (UnsafePointer<CChar>, UInt32) -> Int32
    let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "memfd_create")!
    let create = unsafeBitCast(symbol, to: MemfdCreate.self)
    let fd = create("wire-test", 1 /* MFD_CLOEXEC */)
    precondition(fd >= 0, "memfd_create failed")
    precondition(ftruncate(fd, off_t(size)) == 0)
    return fd
}

func fileSize(_ fd: Int32) -> Int {
    var info = stat()
    precondition(fstat(fd, &info) == 0)
    return Int(info.st_size)
}

/// The 20 bytes of a length prefix and header, built by hand.
func rawHeader(length: UInt32, kind: UInt8, flags: UInt8 = 0, fdCount: UInt16 = 0, reserved: UInt32 = 0,
               id: UInt64 = 0) -> [UInt8] {
    var bytes: [UInt8] = []
    withUnsafeBytes(of: length.bigEndian) { bytes += $0 }
    bytes += [kind, flags]
    withUnsafeBytes(of: fdCount.bigEndian) { bytes += $0 }
    withUnsafeBytes(of: reserved.bigEndian) { bytes += $0 }
    withUnsafeBytes(of: id.bigEndian) { bytes += $0 }
    return bytes
}

/// A raw frame: header for `payload` plus the payload.
func rawFrame(kind: UInt8, flags: UInt8 = 0, fdCount: UInt16 = 0, reserved: UInt32 = 0, id: UInt64 = 0,
              payload: [UInt8] = []) -> [UInt8] {
    rawHeader(length: UInt32(16 + payload.count), kind: kind, flags: flags, fdCount: fdCount,
              reserved: reserved, id: id) + payload
}

/// One raw sendmsg of `bytes` with `fds` as SCM_RIGHTS (any number), for misbehaving peers.
func rawSend(_ socket: Int32, _ bytes: [UInt8], fds: [Int32] = []) {
    var bytes = bytes
    bytes.withUnsafeMutableBytes { data in
        var iov = iovec(iov_base: data.baseAddress, iov_len: data.count)
        let space = 16 + ((fds.count * 4 + 7) & ~7)
        let control = UnsafeMutableRawBufferPointer.allocate(byteCount: max(space, 16), alignment: 8)
        defer { control.deallocate() }
        control.initializeMemory(as: UInt8.self, repeating: 0)
        var message = msghdr()
        withUnsafeMutablePointer(to: &iov) { iovPointer in
            message.msg_iov = iovPointer
            message.msg_iovlen = 1
            if !fds.isEmpty {
                control.storeBytes(of: 16 + fds.count * 4, toByteOffset: 0, as: Int.self)
                control.storeBytes(of: SOL_SOCKET, toByteOffset: 8, as: Int32.self)
                control.storeBytes(of: Int32(SCM_RIGHTS), toByteOffset: 12, as: Int32.self)
                for (index, fd) in fds.enumerated() {
                    control.storeBytes(of: fd, toByteOffset: 16 + 4 * index, as: Int32.self)
                }
                message.msg_control = control.baseAddress
                message.msg_controllen = space
            }
            let sent = sendmsg(socket, &message, Int32(MSG_NOSIGNAL))
            precondition(sent == data.count, "rawSend: sendmsg returned \(sent), errno \(errno)")
        }
    }
}

/// Receives with `socket` and returns the error it throws (or records an issue).
func receiveError(_ socket: FrameSocket, sourceLocation: SourceLocation = #_sourceLocation) -> WireError? {
    do {
        while let frame = try socket.receive() {
            frame.closeFDs()
        }
        Issue.record("expected an error, got end of stream", sourceLocation: sourceLocation)
    } catch {
        return error
    }
    return nil
}

extension Array where Element == UInt8 {
    init(hex: String) {
        let digits = hex.filter(\.isHexDigit)
        var bytes: [UInt8] = []
        var index = digits.startIndex
        while index < digits.endIndex {
            let next = digits.index(index, offsetBy: 2)
            bytes.append(UInt8(digits[index..<next], radix: 16)!)
            index = next
        }
        self = bytes
    }
}

/// Runs `body` on a new thread; `join()` waits for it.
final class TestThread: Sendable {
    private let done = DispatchSemaphore(value: 0)
    init(_ body: @escaping @Sendable () -> Void) {
        Thread.detachNewThread { [done] in
            body()
            done.signal()
        }
    }
    func join() { done.wait() }
}

/// For a value two threads use in ways the compiler cannot check (a FrameSocket's two sides).
struct UncheckedSendableBox<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
