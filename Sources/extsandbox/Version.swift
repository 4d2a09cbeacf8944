import CBuildInfo

/// What `extsandbox --version` prints: the version, and the build scripts/build-cli recorded.
enum ExtSandboxVersion {
    /// The release this source tree is (bumped by hand when one is made).
    static let number = "0.1.0"

    /// "commit 1a2b3c4d5e6f built 2026-11-24T11:00:00Z" as scripts/build-cli wrote it into the
    /// binary, or `nil` for a build that did not record it (a plain `swift build`).
    static var build: String? {
        let info = String(cString: xsb_build_info())
        return info.isEmpty ? nil : info
    }

    /// `extsandbox 0.1.0 (commit 1a2b3c4d5e6f built 2026-11-24T11:00:00Z)`, or `(build unknown)`.
    static var description: String {
        "extsandbox \(number) (\(build ?? "build unknown"))"
    }
}
