import ExtensionCatalog
import Glibc

/// Fuzz entry point of the extension catalog: the files an extension's author or a host writes
/// and the catalog reads (docs/extensions.md): a bundle's `extension.yaml` and a point
/// declaration file (`.appext`).
public enum BundleManifestFuzzing {
    /// A bundle directory made once per process, holding what a manifest may name: an executable,
    /// a resource, a symbolic link inside the bundle and one out of it (to `/etc`). Each input
    /// becomes its `extension.yaml`.
    static let bundle: String? = {
        var template = Array("/tmp/xsb-fuzz-bundle.XXXXXX".utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else { return nil }
        let root = String(cString: made)
        guard mkdir(root + "/bin", 0o755) == 0, mkdir(root + "/share", 0o755) == 0 else { return nil }
        for (path, mode) in [("bin/tool", 0o755), ("share/words.txt", 0o644)] {
            let fd = open(root + "/" + path, O_WRONLY | O_CREAT | O_CLOEXEC, mode_t(mode))
            guard fd >= 0 else { return nil }
            close(fd)
        }
        guard symlink("bin/tool", root + "/tool-link") == 0, symlink("/etc", root + "/out") == 0 else { return nil }
        atexit { BundleManifestFuzzing.removeBundle() }
        return root
    }()

    /// Removes the bundle directory when the process exits (the corpus replay of the test suite
    /// must not leave it in /tmp; libFuzzer exits through `exit` too).
    static func removeBundle() {
        guard let root = bundle else { return }
        for name in ["bin/tool", "share/words.txt", "tool-link", "out", ExtensionManifest.fileName] { unlink(root + "/" + name) }
        for name in ["bin", "share", ""] { rmdir(root + "/" + name) }
    }

    /// Input: manifest or declaration text (UTF-8; other inputs are skipped, as the catalog reads
    /// text). Properties: neither parser crashes or traps, and an error always says something;
    /// a manifest that validates names only real paths inside the bundle (no `..`, absolute path
    /// or symbolic link leads out); a declaration file that parses renders to text that parses
    /// back to the same declarations.
    public static func bundleManifest(_ input: UnsafeRawBufferPointer) {
        guard let text = String(validating: input, as: UTF8.self) else { return }
        declaration(text)
        manifest(text)
    }

    static func declaration(_ text: String) {
        let file: PointDeclarationFile
        do {
            file = try PointDeclarationFile.parse(text, path: "/fuzz/points.appext")
        } catch {
            require(!error.description.isEmpty, "an empty declaration error")
            return
        }
        let again = try? PointDeclarationFile.parse(file.rendered(), path: "/fuzz/points.appext")
        require(again == file, "a declaration file does not survive rendering: \(file) -> \(file.rendered())")
    }

    static func manifest(_ text: String) {
        do {
            _ = try ExtensionManifest.parse(text, path: "/fuzz/extension.yaml")
        } catch {
            require(!error.description.isEmpty, "an empty manifest error")
            return  // the validator parses the same text first: it would refuse it the same way
        }
        guard let bundle else { fatalError("cannot create the fuzz bundle directory under /tmp") }
        let manifestPath = bundle + "/" + ExtensionManifest.fileName
        let fd = open(manifestPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        require(fd >= 0, "cannot write \(manifestPath)")
        let bytes = Array(text.utf8)
        require(bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } == bytes.count, "short write of \(manifestPath)")
        close(fd)
        switch BundleValidator.validate(bundleAt: bundle) {
        case .failure(let problem):
            require(!problem.description.isEmpty, "an empty bundle error")
        case .success(let validated):
            let inside = validated.realPath + "/"
            require(validated.executablePath.hasPrefix(inside), "the executable \(validated.executablePath) is outside the bundle")
            for resource in validated.resources {
                require(resource.real.hasPrefix(inside), "the resource \(resource.real) is outside the bundle")
            }
        }
    }
}
