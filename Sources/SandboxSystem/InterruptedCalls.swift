import Glibc

/// Calls `call` again while it fails with `EINTR` (a signal handler ran, installed without
/// `SA_RESTART`): the result of the first call that succeeds or fails otherwise, `errno` as
/// that call left it. For calls that return a negative number on failure (`read`, `waitpid`,
/// `poll`, `tcsetattr`, …). Never for `close`: on Linux the descriptor is gone after `EINTR`,
/// and a second close may close another thread's new one.
///
/// Inlinable so that the hot paths' `sendmsg`/`recvmsg` loops compile as they did written out.
@inlinable
package func retryingInterrupts<Result: BinaryInteger>(_ call: () -> Result) -> Result {
    while true {
        let result = call()
        if result >= 0 || errno != EINTR { return result }
    }
}

/// Writes all of `bytes` to `fd`, retrying short writes and interruptions; false with `errno`
/// set when a write fails (or writes nothing).
@discardableResult
package func writeAll(_ fd: Int32, _ bytes: some Collection<UInt8>) -> Bool {
    let written: Bool? = bytes.withContiguousStorageIfAvailable { writeAll(fd, bytes: UnsafeRawBufferPointer($0)) }
    return written ?? Array(bytes).withUnsafeBytes { writeAll(fd, bytes: $0) }
}

private func writeAll(_ fd: Int32, bytes: UnsafeRawBufferPointer) -> Bool {
    var offset = 0
    while offset < bytes.count {
        let count = retryingInterrupts { write(fd, bytes.baseAddress! + offset, bytes.count - offset) }
        guard count > 0 else { return false }
        offset += count
    }
    return true
}

/// Everything `fd` reads until end of file, or the errno of the read that failed (`EFBIG`
/// once it passes `limit` bytes).
package func readToEnd(_ fd: Int32, limit: Int) -> Result<[UInt8], Errno> {
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 16384)
    while true {
        let count = chunk.withUnsafeMutableBytes { buffer in retryingInterrupts { read(fd, buffer.baseAddress, buffer.count) } }
        guard count >= 0 else { return .failure(Errno(errno)) }
        if count == 0 { break }
        bytes += chunk[..<count]
        guard bytes.count <= limit else { return .failure(Errno(EFBIG)) }
    }
    return .success(bytes)
}

/// Reads into `buffer` until it is full: how many bytes were read, fewer than it holds when the
/// file ended or a read failed first.
package func readFully(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) -> Int {
    var count = 0
    while count < buffer.count {
        let n = retryingInterrupts { read(fd, buffer.baseAddress! + count, buffer.count - count) }
        guard n > 0 else { break }
        count += n
    }
    return count
}
