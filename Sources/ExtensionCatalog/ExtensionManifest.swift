
/// What a bundle's manifest (`extension.yaml`) says, as written (docs/extensions.md):
///
/// ```yaml
/// schema: 1
/// identifier: org.example.upcase
/// name: Upcase
/// version: "1.0"
/// point: org.example.text
/// executable: bin/upcase          # inside the bundle
/// resources: [share/words.txt]    # optional, read-only inside the sandbox
/// ```
public struct ExtensionManifest: Sendable, Hashable {
    public static let schemaVersion = 1
    /// The manifest's file name inside a bundle.
    public static let fileName = "extension.yaml"

    public var identifier: String
    public var displayName: String
    public var version: String
    public var point: String
    /// The executable's path relative to the bundle.
    public var executable: String
    /// Paths relative to the bundle that the extension may read.
    public var resources: [String]
    /// The line of each field, for errors found after parsing.
    public var lines: [String: Int]

    /// Parses a manifest's text; `path` names it in errors.
    public static func parse(_ text: String, path: String) throws(CatalogProblem) -> ExtensionManifest {
        try parse(Array(text.utf8), path: path)
    }

    /// Parses a manifest file's bytes; `path` names it in errors. Bytes that are not UTF-8 are
    /// an error at their line (YAML is Unicode).
    public static func parse(_ bytes: [UInt8], path: String) throws(CatalogProblem) -> ExtensionManifest {
        let root = try ManifestFields.document(bytes, path: path)
        let fields = try ManifestFields(
            root, path: path, allowed: ["schema", "identifier", "name", "version", "point", "executable", "resources"])
        try fields.checkSchema(schemaVersion)
        let identifier = try fields.requiredString("identifier")
        try ManifestFields.checkReverseDNS(identifier, what: "identifier", path: path, line: fields.line("identifier"))
        let point = try fields.requiredString("point")
        try ManifestFields.checkReverseDNS(point, what: "point", path: path, line: fields.line("point"))
        var lines: [String: Int] = [:]
        for key in ["schema", "identifier", "name", "version", "point", "executable", "resources"] { lines[key] = fields.line(key) }
        let resources = try fields.stringList("resources")
        for (index, (_, line)) in resources.enumerated() { lines["resources.\(index)"] = line }
        return ExtensionManifest(
            identifier: identifier, displayName: try fields.requiredString("name"), version: try fields.requiredString("version"),
            point: point, executable: try fields.requiredString("executable"), resources: resources.map(\.0), lines: lines)
    }
}
