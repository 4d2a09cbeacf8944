import SandboxSystem

/// A `FileDescriptor` for a number the test keeps and closes itself (or a made-up number that
/// is only encoded, never used): it never closes the number.
public func borrowed(_ fd: Int32) -> FileDescriptor {
    FileDescriptor(borrowing: fd)!
}
