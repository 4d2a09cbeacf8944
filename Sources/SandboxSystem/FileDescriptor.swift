import Glibc
import Synchronization

/// An open file descriptor with one owner, closed exactly once: by ``close()`` or when the last
/// reference goes, whichever is first.
///
/// Code that passes a raw `Int32` around has to remember who closes it and must never close it
/// twice (a second `close` may close a descriptor another thread has just been given the same
/// number for). With this type the descriptor is closed by its owner's lifetime, an invalid one
/// cannot be made (no `-1` travels), and ``release()`` hands the number on explicitly when another
/// owner (a C launch, a socket type of its own) takes it.
///
/// Public because the wire module's sockets (``ExtSandboxWire``'s `FrameSocket`), which
/// extensions use, hold one; everything else of this module stays inside the package.
public final class FileDescriptor: Sendable {
    /// The descriptor's number, valid while this object is open (not closed or released): pass
    /// it to system calls only, never keep it beyond this object.
    public let rawValue: Int32
    private let owned = Atomic<Bool>(true)
    /// How the descriptor is closed when not with `close(2)` on the spot.
    private let closer: (@Sendable (Int32) -> Void)?

    /// Takes ownership of `rawValue`; `nil` for a negative value (a failed `open`, whose
    /// `errno` is left untouched for the caller).
    public init?(adopting rawValue: Int32) {
        guard rawValue >= 0 else { return nil }
        self.rawValue = rawValue
        closer = nil
    }

    /// Takes ownership of `rawValue`, to be closed by `closer` (given the number, once) instead
    /// of `close(2)`: for a descriptor whose plain close may block, as one another process sent
    /// can. `nil` for a negative value.
    public init?(adopting rawValue: Int32, closingWith closer: @escaping @Sendable (Int32) -> Void) {
        guard rawValue >= 0 else { return nil }
        self.rawValue = rawValue
        self.closer = closer
    }

    /// Borrows `rawValue` from an owner of another kind, which keeps it open while this object
    /// is used and closes it itself: this object never closes it (``close()`` only stops its
    /// use here). For handing such a number to an API that takes a `FileDescriptor`. `nil` for a
    /// negative value.
    public convenience init?(borrowing rawValue: Int32) {
        self.init(adopting: rawValue, closingWith: { _ in })
    }

    /// Whether this object still owns the descriptor (neither closed nor released).
    public var isOpen: Bool { owned.load(ordering: .acquiring) }

    /// Closes the descriptor now; later calls (and the deinit) do nothing.
    public func close() {
        guard owned.exchange(false, ordering: .acquiringAndReleasing) else { return }
        if let closer { closer(rawValue) } else { _ = Glibc.close(rawValue) }
    }

    /// Gives up ownership without closing: the caller now owns the returned number. `nil` if it
    /// was closed or released already.
    public func release() -> Int32? {
        owned.exchange(false, ordering: .acquiringAndReleasing) ? rawValue : nil
    }

    deinit { close() }
}

extension Array where Element == FileDescriptor {
    /// Releases every descriptor still owned (``FileDescriptor/release()``): the caller owns the
    /// numbers returned, in order; closed or released ones are left out.
    public func releaseAll() -> [Int32] { compactMap { $0.release() } }
}
