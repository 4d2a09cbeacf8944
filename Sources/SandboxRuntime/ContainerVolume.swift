import CSupervisorSupport
import Glibc
import SandboxSystem
import Synchronization

/// File system images that a root supervisor mounts for its sandboxes (an extension's bounded
/// container: docs/containers.md). Each image is mounted once per supervisor process, as a
/// detached mount that no mount namespace contains; a launch gets a clone of it placed at a path
/// for as long as the sandbox takes to bind it (``Placement/remove()``), and the sandbox's own
/// bind keeps the file system alive while it runs.
///
/// Nothing is left behind: the detached mount lives as long as this process holds its fd or a
/// sandbox its bind (both end with a SIGKILLed host: the sandboxes die with it), and the loop
/// device frees itself once the file system is gone (`LO_FLAGS_AUTOCLEAR`). A placement is
/// the only mount in the host's namespace, for the length of one launch; one that a SIGKILL
/// leaves there is detached before the next placement at that path.
///
/// An image is locked (`flock`, exclusive) while mounted, so that two supervisor processes never
/// mount the same image at once (two ext4 mounts of one image would corrupt it).
package final class ContainerVolumes: Sendable {
    package static let shared = ContainerVolumes()

    private struct Volume: Sendable {
        var image: FileDescriptor
        var mount: FileDescriptor
        /// Launches and sandboxes using it.
        var users: Int
        /// Launches that need it placed (all at the same path: one placement serves them).
        var placements: Int
    }

    private let volumes = Mutex<[String: Volume]>([:])

    /// The image's file system placed at `mountPoint` for a launch. ``remove()`` takes the
    /// placement away (the sandbox has its bind by then); ``release()`` ends this use of the image.
    package final class Placement: Sendable {
        let volumes: ContainerVolumes
        let image: String
        let mountPoint: String
        private let placed = Atomic<Bool>(true)
        private let released = Atomic<Bool>(false)

        init(volumes: ContainerVolumes, image: String, mountPoint: String) {
            self.volumes = volumes
            self.image = image
            self.mountPoint = mountPoint
        }

        package func remove() {
            guard placed.exchange(false, ordering: .relaxed) else { return }
            volumes.unplace(image, at: mountPoint)
        }

        package func release() {
            remove()
            guard !released.exchange(true, ordering: .relaxed) else { return }
            volumes.release(image)
        }

        deinit { release() }
    }

    /// Mounts `image` (once per process) and places a clone of its file system at `mountPoint`.
    package func place(image: String, at mountPoint: String) throws(SandboxError) -> Placement {
        try volumes.withLock { (volumes: inout [String: Volume]) throws(SandboxError) in
            if volumes[image] == nil {
                // A placement a SIGKILLed supervisor left holds the image (and its lock, which
                // the loop device's reference to the file keeps): detached first.
                Self.detachAll(at: mountPoint)
                volumes[image] = try Self.mount(image)
            }
            if volumes[image]!.placements == 0 {
                let rc = mountPoint.withCString { xsb_volume_place(volumes[image]!.mount.rawValue, $0) }
                guard rc == 0 else {
                    if volumes[image]!.users == 0 { volumes[image] = nil }
                    throw SandboxError(step: .bindMount, errorNumber: -rc, detail: "cannot place the container's file system at \(mountPoint)")
                }
            }
            volumes[image]!.placements += 1
            volumes[image]!.users += 1
        }
        return Placement(volumes: self, image: image, mountPoint: mountPoint)
    }

    /// Opens, locks and mounts `image`; its root is made the sandbox's alone (mode 0700).
    private static func mount(_ image: String) throws(SandboxError) -> Volume {
        guard let fd = FileDescriptor(adopting: open(image, O_RDWR | O_NOFOLLOW | O_CLOEXEC)) else {
            throw SandboxError(step: .bindMount, errorNumber: errno, detail: "the container's image \(image)")
        }
        // The last user's loop device may take a moment to let go of the file (and its lock).
        var attempts = 0
        while flock(fd.rawValue, LOCK_EX | LOCK_NB) != 0 {
            let error = errno
            attempts += 1
            guard error == EWOULDBLOCK, attempts < 200 else {
                throw SandboxError(step: .bindMount, errorNumber: error, detail: error == EWOULDBLOCK
                    ? "the container's image \(image) is mounted by another host process; an extension's container serves one host process at a time"
                    : "cannot lock the container's image \(image)")
            }
            usleep(10_000)
        }
        let mount = xsb_volume_mount(fd.rawValue)
        guard let mountFD = FileDescriptor(adopting: mount) else {
            throw SandboxError(step: .bindMount, errorNumber: -mount, detail: "cannot mount the container's image \(image)")
        }
        guard let root = FileDescriptor(adopting: openat(mountFD.rawValue, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)),
              fchmod(root.rawValue, 0o700) == 0 else {
            throw SandboxError(step: .bindMount, errorNumber: errno, detail: "cannot make the container's file system private (\(image))")
        }
        return Volume(image: fd, mount: mountFD, users: 0, placements: 0)
    }

    private func unplace(_ image: String, at mountPoint: String) {
        volumes.withLock { volumes in
            guard volumes[image] != nil else { return }
            volumes[image]!.placements -= 1
            if volumes[image]!.placements == 0 { Self.detachAll(at: mountPoint) }
        }
    }

    /// Whether this process has `image` mounted (for tests and diagnostics).
    package func isMounted(_ image: String) -> Bool { volumes.withLock { $0[image] != nil } }

    private func release(_ image: String) {
        let unused = volumes.withLock { volumes -> Volume? in
            guard var volume = volumes[image] else { return nil }
            volume.users -= 1
            volumes[image] = volume.users > 0 ? volume : nil
            return volume.users > 0 ? nil : volume
        }
        guard let unused else { return }
        // The last close unmounts the file system, which writes it back: not on the caller's
        // thread (the event monitor's, when a sandbox ends).
        let close: @Sendable () -> Void = {
            unused.mount.close()
            unused.image.close()
        }
        do {
            try SupervisorThread.start(name: "xsb-unmount", stackSize: 256 << 10, close)
        } catch {
            close()
        }
    }

    /// Detaches whatever is mounted at `path` (a placement a SIGKILLed supervisor left, or ours).
    static func detachAll(at path: String) {
        for _ in 0..<8 where umount2(path, Int32(MNT_DETACH) | Int32(UMOUNT_NOFOLLOW)) == 0 {}
    }
}
