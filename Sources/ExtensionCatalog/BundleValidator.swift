import Glibc
import SandboxSystem

/// A bundle that passed validation: its manifest, and the real paths of what it names.
public struct ValidatedBundle: Sendable, Hashable {
    /// The bundle directory as found (in its location).
    public var path: String
    /// Its real path (no symbolic links): every file it names is inside it.
    public var realPath: String
    public var manifest: ExtensionManifest
    public var manifestPath: String
    /// The executable's real path, inside ``realPath``.
    public var executablePath: String
    /// Real paths of the resources, inside ``realPath``, with their paths relative to the bundle.
    public var resources: [(relative: String, real: String)]

    /// Paths by bytes: a bundle that now resolves to a sibling whose name is another spelling of
    /// its own (the Kelvin sign and "K") is another bundle.
    public static func == (a: ValidatedBundle, b: ValidatedBundle) -> Bool {
        FilePaths.isSame(a.path, b.path) && FilePaths.isSame(a.realPath, b.realPath) && a.manifest == b.manifest
            && FilePaths.isSame(a.manifestPath, b.manifestPath) && FilePaths.isSame(a.executablePath, b.executablePath)
            && FilePaths.areSame(a.resources.map(\.real), b.resources.map(\.real))
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(path)
        hasher.combine(manifest)
    }
}

/// Checks a bundle directory: the manifest parses, what it names is inside the bundle (no `..`,
/// no absolute path, no symbolic link out of it), and nothing that decides what runs is
/// writable by anyone but its owner and root.
public enum BundleValidator {
    /// Validates the bundle at `path`. `knownPoint` says whether a point name is acceptable
    /// (the host's points for bundled extensions); the caller handles unknown points otherwise.
    public static func validate(bundleAt path: String, knownPoint: ((String) -> Bool)? = nil) -> Result<ValidatedBundle, CatalogProblem> {
        do throws(CatalogProblem) {
            return .success(try check(path, knownPoint: knownPoint))
        } catch {
            return .failure(error)
        }
    }

    private static func check(_ path: String, knownPoint: ((String) -> Bool)?) throws(CatalogProblem) -> ValidatedBundle {
        var info = stat()
        guard lstat(path, &info) == 0 else {
            if errno == ENOENT { throw CatalogProblem(.notInstalled, file: path, "not installed: the bundle directory does not exist (removed?)") }
            throw CatalogProblem(.broken, file: path, "cannot stat: \(errnoText())")
        }
        guard info.st_mode & S_IFMT != S_IFLNK else {
            throw CatalogProblem(.inconsistent, file: path, "the bundle is a symbolic link (a bundle must be a real directory)")
        }
        guard info.st_mode & S_IFMT == S_IFDIR else { throw CatalogProblem(.broken, file: path, "not a directory") }
        try checkNotWritableByOthers(info, path: path, what: "the bundle directory", line: 0)
        guard let realBundle = SystemFiles.realPath(path) else { throw CatalogProblem(.broken, file: path, "cannot resolve: \(errnoText())") }

        let manifestPath = FilePaths.join(path, ExtensionManifest.fileName)
        var manifestInfo = stat()
        guard lstat(manifestPath, &manifestInfo) == 0 else {
            throw CatalogProblem(.broken, file: manifestPath, "missing manifest (\(errnoText()))")
        }
        guard manifestInfo.st_mode & S_IFMT == S_IFREG else {
            throw CatalogProblem(.inconsistent, file: manifestPath,
                                 manifestInfo.st_mode & S_IFMT == S_IFLNK ? "the manifest is a symbolic link" : "the manifest is not a regular file")
        }
        try checkNotWritableByOthers(manifestInfo, path: manifestPath, what: "the manifest", line: 0)
        let bytes: [UInt8]
        switch SystemFiles.bytes(manifestPath, limit: 64 << 10) {
        case .failure(let error): throw CatalogProblem(.broken, file: manifestPath, "cannot read: \(error)")
        case .success(let read): bytes = read
        }
        let manifest = try ExtensionManifest.parse(bytes, path: manifestPath)
        if let knownPoint, !knownPoint(manifest.point) {
            throw CatalogProblem(.inconsistent, file: manifestPath, line: manifest.lines["point"] ?? 0,
                                 "unknown point \(manifest.point): the host does not define it")
        }

        let executable = try inside(realBundle, bundle: path, relative: manifest.executable, field: "executable",
                                    manifestPath: manifestPath, line: manifest.lines["executable"] ?? 0)
        var exeInfo = stat()
        guard stat(executable, &exeInfo) == 0 else {
            throw CatalogProblem(.broken, file: manifestPath, line: manifest.lines["executable"] ?? 0,
                                 "executable \(manifest.executable): \(errnoText())")
        }
        guard exeInfo.st_mode & S_IFMT == S_IFREG else {
            throw CatalogProblem(.broken, file: manifestPath, line: manifest.lines["executable"] ?? 0,
                                 "executable \(manifest.executable) is not a regular file")
        }
        guard exeInfo.st_mode & 0o111 != 0 else {
            throw CatalogProblem(.broken, file: manifestPath, line: manifest.lines["executable"] ?? 0,
                                 "executable \(manifest.executable) has no execute permission")
        }
        try checkNotWritableByOthers(exeInfo, path: executable, what: "the executable", line: 0)
        if let interpreter = interpreter(ofScriptAt: executable), isResource(interpreter) {
            throw CatalogProblem(.inconsistent, file: FilePaths.join(path, manifest.executable), line: 1,
                                 "the executable's interpreter \(interpreter) is a bundle resource; resources are data, mounted noexec, so it can never run")
        }

        var resources: [(String, String)] = []
        for (index, resource) in manifest.resources.enumerated() {
            let line = manifest.lines["resources.\(index)"] ?? 0
            let real = try inside(realBundle, bundle: path, relative: resource, field: "resource", manifestPath: manifestPath, line: line)
            resources.append((resource, real))
        }
        return ValidatedBundle(path: path, realPath: realBundle, manifest: manifest, manifestPath: manifestPath,
                               executablePath: executable, resources: resources)
    }

    /// The real path of `relative` inside the bundle, or why it is not inside.
    private static func inside(_ realBundle: String, bundle: String, relative: String, field: String,
                               manifestPath: String, line: Int) throws(CatalogProblem) -> String {
        if FilePaths.isAbsolute(relative) || FilePaths.components(relative).contains(where: { $0.utf8.elementsEqual("..".utf8) }) {
            throw CatalogProblem(.inconsistent, file: manifestPath, line: line,
                                 "\(field) \(relative) is outside the bundle (paths are relative to the bundle, without '..')")
        }
        let joined = FilePaths.join(bundle, relative)
        guard let real = SystemFiles.realPath(joined) else {
            throw CatalogProblem(.broken, file: manifestPath, line: line, "\(field) \(relative): \(errnoText())")
        }
        // (Below "/" lies every absolute path: a bundle at the root contains nothing.)
        guard realBundle != "/", FilePaths.isBelow(real, realBundle) else {
            throw CatalogProblem(.inconsistent, file: manifestPath, line: line,
                                 "\(field) \(relative) is a symbolic link out of the bundle (to \(real))")
        }
        return real
    }

    /// Where the runtime binds a bundle's resources inside the sandbox, without exec rights
    /// (`ExtensionEnvironment.resourcesDirectory`).
    public static let resourcesMountPoint = "/extension"

    /// The interpreter a `#!` line names, as the kernel reads it (the first 256 bytes; blanks
    /// after `#!` skipped, the path up to the next blank or line end), or `nil` for no `#!`.
    static func interpreter(ofScriptAt path: String) -> String? {
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var head = [UInt8](repeating: 0, count: 256)
        let count = head.withUnsafeMutableBytes { readFully(fd, into: $0) }
        guard count > 2, head[0] == 0x23, head[1] == 0x21 else { return nil }  // "#!"
        let blank: Set<UInt8> = [0x20, 0x09]
        let line = head[2..<count].prefix { $0 != 0x0a && $0 != 0 }.drop { blank.contains($0) }
        let interpreter = line.prefix { !blank.contains($0) }
        return interpreter.isEmpty ? nil : String(decoding: interpreter, as: UTF8.self)
    }

    /// Whether `path` (absolute, inside the sandbox) lies in ``resourcesMountPoint``, `.` and
    /// `..` taken as the kernel takes them (no link can lead elsewhere: resources are bound
    /// by their real paths): split at slash bytes, as characters a slash with a combining mark
    /// after it (or a prepended mark before it) would be no slash.
    static func isResource(_ path: String) -> Bool {
        var components: [Substring] = []
        for component in FilePaths.components(path) where !component.utf8.elementsEqual(".".utf8) {
            if component.utf8.elementsEqual("..".utf8) { _ = components.popLast() } else { components.append(component) }
        }
        let top = FilePaths.lastComponent(resourcesMountPoint)
        return FilePaths.isAbsolute(path) && components.first.map { $0.utf8.elementsEqual(top.utf8) } == true
    }

    private static func checkNotWritableByOthers(_ info: stat, path: String, what: String, line: Int) throws(CatalogProblem) {
        guard info.st_mode & 0o022 == 0 else {
            let who = info.st_mode & 0o002 != 0 ? "everyone" : "its group"
            throw CatalogProblem(.unsafe, file: path, line: line,
                                 "\(what) is writable by \(who) (mode \(String(info.st_mode & 0o7777, radix: 8))): only its owner and root may write it")
        }
    }
}

func errnoText() -> String { String(cString: strerror(errno)) }
