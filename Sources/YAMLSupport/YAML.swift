import CYAML

/// A node of a YAML document, with its position, as policy files and the catalog's manifests
/// need it: every scalar stays the text that was written (no tag resolution: `no` and `0x10` are
/// strings until a policy section or a manifest field interprets them), and mappings keep their
/// entries in file order.
///
/// Built on libyaml's event parser rather than a Swift YAML package: those resolve tags with
/// Foundation's regular expressions, and linking Foundation's CoreFoundation layer costs every
/// `extsandbox exec` about a millisecond of start-up (docs/architecture.md).
package enum YAMLNode {
    case scalar(Scalar)
    case mapping(Mapping)
    case sequence(List)
    /// `*name`: policy files reject aliases, so only the position is kept.
    case alias(YAMLMark)

    package struct Scalar {
        package var string: String
        package var style: Style
        package var mark: YAMLMark

        package enum Style { case plain, singleQuoted, doubleQuoted, literal, folded }
    }

    package struct Mapping: Sequence {
        package var entries: [(key: YAMLNode, value: YAMLNode)]
        package var mark: YAMLMark
        package func makeIterator() -> IndexingIterator<[(key: YAMLNode, value: YAMLNode)]> { entries.makeIterator() }
    }

    package struct List: Sequence {
        package var items: [YAMLNode]
        package var mark: YAMLMark
        package func makeIterator() -> IndexingIterator<[YAMLNode]> { items.makeIterator() }
    }

    package var mark: YAMLMark {
        switch self {
        case .scalar(let s): return s.mark
        case .mapping(let m): return m.mark
        case .sequence(let l): return l.mark
        case .alias(let mark): return mark
        }
    }
}

/// A 1-based line and column in a YAML text.
package struct YAMLMark: Equatable {
    package var line: Int
    package var column: Int

    package init(line: Int, column: Int) {
        self.line = line
        self.column = column
    }

    init(_ mark: yaml_mark_t) {
        self.init(line: Int(mark.line) + 1, column: Int(mark.column) + 1)
    }
}

/// Why a text is not one YAML document.
package struct YAMLError: Error, Equatable {
    /// What went wrong, in libyaml's words, e.g. "did not find expected ',' or ']'".
    package var problem: String
    package var mark: YAMLMark
    /// What was being read when it went wrong, e.g. "while parsing a flow sequence", and where
    /// that started.
    package var context: String?
    package var contextMark: YAMLMark?
}

package enum YAMLReader {
    /// Deeper nesting is refused: the tree is walked recursively later, and a hostile file of a
    /// million `[` must get an error, not overflow the stack.
    static let maximumDepth = 64

    /// The single document in `text`, or nil when the text holds no document at all.
    package static func compose(_ text: String) throws(YAMLError) -> YAMLNode? {
        try compose(utf8: Array(text.utf8))
    }

    /// The single document in a file's bytes, or nil when they hold no document at all. YAML is
    /// Unicode, read here as UTF-8 only: a byte that is not UTF-8 is an error at its line and
    /// column (libyaml's reader finds it), never replaced by U+FFFD and read on.
    package static func compose(utf8 bytes: [UInt8]) throws(YAMLError) -> YAMLNode? {
        var bytes = bytes
        if bytes.isEmpty { bytes = [0x0a] }  // libyaml wants a non-empty buffer
        return try bytes.withUnsafeBufferPointer { (buffer) throws(YAMLError) -> YAMLNode? in
            // On the heap: libyaml keeps a pointer to the parser itself (its read handler's data),
            // so it must stay at one address for the whole parse.
            let parser = UnsafeMutablePointer<yaml_parser_t>.allocate(capacity: 1)
            defer { parser.deallocate() }
            guard yaml_parser_initialize(parser) == 1 else {
                throw YAMLError(problem: "out of memory", mark: YAMLMark(line: 1, column: 1))
            }
            defer { yaml_parser_delete(parser) }
            yaml_parser_set_input_string(parser, buffer.baseAddress, buffer.count)
            // Not guessed from the first bytes: FF FE would otherwise be taken for UTF-16.
            yaml_parser_set_encoding(parser, YAML_UTF8_ENCODING)
            var composer = Composer()
            while true {
                var event = yaml_event_t()
                guard yaml_parser_parse(parser, &event) == 1 else { throw error(of: parser.pointee, in: buffer) }
                defer { yaml_event_delete(&event) }
                if event.type == YAML_STREAM_END_EVENT { return composer.root }
                try composer.consume(event)
            }
        }
    }

    private static func error(of parser: yaml_parser_t, in text: UnsafeBufferPointer<UInt8>) -> YAMLError {
        var problem = parser.problem.map { String(cString: $0) }
            ?? (parser.error == YAML_MEMORY_ERROR ? "out of memory" : "not valid YAML")
        if parser.error == YAML_READER_ERROR && problem.contains("UTF-8") {
            if parser.problem_value >= 0 { problem += " 0x" + String(parser.problem_value, radix: 16, uppercase: true) }
            problem += ": the file is not UTF-8 text"
        }
        let context = parser.context.map { String(cString: $0) }
        // Reader errors (bad UTF-8, a control character) have a byte offset, not a line.
        let mark = parser.error == YAML_READER_ERROR
            ? position(ofByte: Int(parser.problem_offset), in: text) : YAMLMark(parser.problem_mark)
        return YAMLError(problem: problem, mark: mark, context: context,
                         contextMark: context == nil ? nil : YAMLMark(parser.context_mark))
    }

    /// Line and column (in characters) of byte `offset`.
    private static func position(ofByte offset: Int, in text: UnsafeBufferPointer<UInt8>) -> YAMLMark {
        var line = 1, column = 1
        for byte in text.prefix(max(0, min(offset, text.count))) {
            if byte == 0x0a {
                line += 1
                column = 1
            } else if byte & 0xc0 != 0x80 {  // not a UTF-8 continuation byte
                column += 1
            }
        }
        return YAMLMark(line: line, column: column)
    }

    /// Turns libyaml's events into a tree, keeping open collections on a stack (mutated in
    /// place: an append never copies a collection's elements).
    private struct Composer {
        struct Open {
            var mark: YAMLMark
            var isMapping: Bool
            var items: [YAMLNode] = []
            var entries: [(key: YAMLNode, value: YAMLNode)] = []
            var pendingKey: YAMLNode?

            var node: YAMLNode {
                isMapping ? .mapping(.init(entries: entries, mark: mark)) : .sequence(.init(items: items, mark: mark))
            }
        }

        var stack: [Open] = []
        var root: YAMLNode?
        var documents = 0

        mutating func consume(_ event: yaml_event_t) throws(YAMLError) {
            let mark = YAMLMark(event.start_mark)
            switch event.type {
            case YAML_DOCUMENT_START_EVENT:
                documents += 1
                if documents > 1 {
                    throw YAMLError(problem: "a policy file holds one YAML document, found a second one (---)", mark: mark)
                }
            case YAML_SCALAR_EVENT:
                let scalar = event.data.scalar
                let text = scalar.value.map {
                    String(decoding: UnsafeBufferPointer(start: $0, count: scalar.length), as: UTF8.self)
                } ?? ""
                add(.scalar(.init(string: text, style: style(scalar.style), mark: mark)))
            case YAML_ALIAS_EVENT:
                add(.alias(mark))
            case YAML_SEQUENCE_START_EVENT, YAML_MAPPING_START_EVENT:
                guard stack.count < YAMLReader.maximumDepth else {
                    throw YAMLError(problem: "nested more than \(YAMLReader.maximumDepth) levels deep", mark: mark)
                }
                stack.append(Open(mark: mark, isMapping: event.type == YAML_MAPPING_START_EVENT))
            case YAML_SEQUENCE_END_EVENT, YAML_MAPPING_END_EVENT:
                guard let closed = stack.popLast() else { return }
                add(closed.node)
            default:
                break  // stream start/end, document end
            }
        }

        private mutating func add(_ node: YAMLNode) {
            guard !stack.isEmpty else {
                root = node
                return
            }
            let top = stack.count - 1
            if !stack[top].isMapping {
                stack[top].items.append(node)
            } else if let key = stack[top].pendingKey {
                stack[top].entries.append((key, node))
                stack[top].pendingKey = nil
            } else {
                stack[top].pendingKey = node
            }
        }

        private func style(_ style: yaml_scalar_style_t) -> YAMLNode.Scalar.Style {
            switch style {
            case YAML_SINGLE_QUOTED_SCALAR_STYLE: return .singleQuoted
            case YAML_DOUBLE_QUOTED_SCALAR_STYLE: return .doubleQuoted
            case YAML_LITERAL_SCALAR_STYLE: return .literal
            case YAML_FOLDED_SCALAR_STYLE: return .folded
            default: return .plain
            }
        }
    }
}
