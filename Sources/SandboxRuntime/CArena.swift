import Glibc

/// C memory for one launch: the strings, arrays and structs of an `xsb_spawn_config`, which
/// `xsb_spawn_start` writes as the launch description the sandbox init reads (offsets, not pointers).
/// Everything lives until the arena is released, after `xsb_spawn_start` returns.
final class CArena {
    private var allocations: [UnsafeMutableRawPointer] = []

    deinit {
        for pointer in allocations { free(pointer) }
    }

    func string(_ text: String) -> UnsafeMutablePointer<CChar> {
        let pointer = strdup(text)!
        allocations.append(UnsafeMutableRawPointer(pointer))
        return pointer
    }

    /// Raw bytes (not NUL-terminated unless the text is).
    func bytes(_ data: [UInt8]) -> UnsafeMutablePointer<CChar> {
        let raw = malloc(max(data.count, 1))!
        allocations.append(raw)
        data.withUnsafeBytes { source in
            if let base = source.baseAddress { raw.copyMemory(from: base, byteCount: data.count) }
        }
        return raw.assumingMemoryBound(to: CChar.self)
    }

    /// A NULL-terminated array of C strings, as execve wants.
    func stringArray(_ items: [String]) -> UnsafeMutablePointer<UnsafeMutablePointer<CChar>?> {
        let array = self.array(of: UnsafeMutablePointer<CChar>?.self, count: items.count + 1)
        for (index, item) in items.enumerated() { array[index] = string(item) }
        array[items.count] = nil
        return array
    }

    func array<T>(of type: T.Type, count: Int) -> UnsafeMutablePointer<T> {
        let raw = calloc(max(count, 1), MemoryLayout<T>.stride)!
        allocations.append(raw)
        return raw.bindMemory(to: T.self, capacity: max(count, 1))
    }
}
