import ExtensionCatalog
import ExtSandbox
import Foundation
import Testing
import TestSupport

/// README.md's Swift code compiles as written and works for a new host developer: every ```swift
/// block of the README (and of the DocC getting-started articles) is held verbatim by a source
/// file the package builds (so editing one without the other fails here), and the host and
/// extension they make run against each other.
@Suite("README.md's Swift snippets")
struct ReadmeSnippetTests {
    /// The files that hold the README's blocks: the host's code and the runtime's (in this target),
    /// the contract (a library target) and the extension (an executable target, for its `@main`);
    /// and the byte-level extension of the SDK's article.
    static let snippetFiles = [
        "Tests/ExtSandboxTests/ReadmeHostSnippet.swift",
        "Tests/ExtSandboxTests/ReadmeRuntimeSnippet.swift",
        "Tests/Fixtures/readme-contract/TextTransform.swift",
        "Tests/Fixtures/readme-extension/ReadmeExtension.swift",
        "Tests/ExtSandboxExtensionTests/DocCSnippets.swift",
    ]

    /// The documents whose Swift code must compile: the README and the DocC articles.
    static let documents = [
        "README.md",
        "Sources/ExtSandbox/ExtSandbox.docc/GettingStarted.md",
        "Sources/ExtSandboxExtension/ExtSandboxExtension.docc/GettingStarted.md",
    ]

    static func read(_ relativePath: String) throws -> String {
        try String(contentsOf: TestPaths.packageRoot.appendingPathComponent(relativePath), encoding: .utf8)
    }

    /// The ```swift blocks of `markdown`, each with the line it starts on.
    static func swiftBlocks(of markdown: String) -> [(line: Int, code: String)] {
        var blocks: [(line: Int, code: String)] = []
        var current: (line: Int, lines: [Substring])?
        for (index, line) in markdown.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            if let open = current {
                if line.hasPrefix("```") {
                    blocks.append((open.line, open.lines.joined(separator: "\n") + "\n"))
                    current = nil
                } else {
                    current?.lines.append(line)
                }
            } else if line == "```swift" {
                current = (index + 1, [])
            }
        }
        return blocks
    }

    /// Whether `source` holds `block` verbatim: each of its paragraphs (parts between blank lines),
    /// in order. A block that mixes imports and statements has its imports at the top of a file
    /// and its statements in a function; the paragraphs themselves are unchanged.
    static func holds(_ source: String, _ block: String) -> Bool {
        var rest = source[...]
        for paragraph in block.components(separatedBy: "\n\n") where !paragraph.isEmpty {
            guard let found = rest.range(of: paragraph) else { return false }
            rest = rest[found.upperBound...]
        }
        return true
    }

    @Test("every ```swift block of README.md and the DocC articles is in a file the package compiles", arguments: documents)
    func everyBlockIsCompiled(_ document: String) throws {
        let blocks = Self.swiftBlocks(of: try Self.read(document))
        // The README: the runtime, the contract, the extension, the host, the declaration.
        #expect(blocks.count >= (document == "README.md" ? 5 : 2))
        let sources = try Self.snippetFiles.map(Self.read)
        for block in blocks {
            #expect(sources.contains { Self.holds($0, block.code) },
                    "\(document):\(block.line): this ```swift block is in none of \(Self.snippetFiles.joined(separator: ", ")); copy it there verbatim, so that it is compiled")
        }
    }

    @Test("a README block edited on one side only is found")
    func editedBlockIsFound() throws {
        let blocks = Self.swiftBlocks(of: "text\n```swift\nlet a = 1\n\nlet b = 2\n```\n```sh\nls\n```\n")
        #expect(blocks.map(\.code) == ["let a = 1\n\nlet b = 2\n"])
        #expect(blocks.map(\.line) == [2])
        #expect(Self.holds("import X\nfunc f() {\nlet a = 1\n    x()\nlet b = 2\n}\n", blocks[0].code))
        #expect(!Self.holds("let b = 2\nlet a = 1\n", blocks[0].code))
        #expect(!Self.holds("let a = 1\n\nlet b = 3\n", blocks[0].code))
    }

    @Test("the README's host finds nothing before the owner approves, then calls the README's extension")
    func hostCallsExtension() async throws {
        let world = try ExtensionWorld()
        let bundle = try world.install("com.example.upcase", point: "com.example.text",
                                       executableSource: TestPaths.product("readme-extension"))
        try await AppExtensionHost.$current.withValue(AppExtensionHost(identifier: "com.example.host", locations: world.locations)) {
            // Installed but unapproved: no identity, and the README's code says so instead of crashing.
            #expect(try await transform("hello") == nil)
            let approval = try ExtensionCatalog.currentApproval(of: try BundleValidator.validate(bundleAt: bundle).get())
            _ = try ApprovalStore(path: world.stateFile).update { $0.approvals["com.example.upcase"] = approval }
            #expect(try await transform("hello") == "HELLO")
        }
    }
}
