import Distributed
import Synchronization

/// A method identifier from the wire, checked before the runtime looks it up and calls it.
///
/// The identifier is the mangled name of the distributed thunk of a method of the contract's
/// `@Resolvable` stub (`$s` + the stub's mangled type name + the method's name and type +
/// `TE`). The runtime calls whatever such a name designates on the object it is given, trusting
/// the caller that the object is of the method's type: a peer could name another type's method.
/// So only the contract stub's methods are served (for which the runtime checks, through the
/// protocol's witness tables, that the object conforms). And the runtime resolves the types an
/// identifier spells without checking them: a name that no compiled method has, made up to look
/// like one, can make it follow a bad pointer. So an identifier reaches the runtime's type
/// lookup only once its exact name is found among the process's distributed accessors.
struct MethodIdentifier {
    /// The methods an exported object serves: those of one stub type.
    struct Contract {
        /// `$s` and the stub's mangled type name, with which each of its methods' names begins.
        let prefix: String

        init(_ stub: any DistributedActor.Type) {
            prefix = "$s" + (_mangledTypeName(stub) ?? "\(stub)")
        }
    }

    let text: String

    init(_ text: String) { self.text = text }

    /// The method's number of parameters if it is a distributed method of `contract`; nil if
    /// not (another type's, or no method at all).
    func parameterCount(in contract: Contract) -> Int? {
        guard text.hasPrefix(contract.prefix), text.hasSuffix("TE") else { return nil }
        if let known = Self.compiled.withLock({ $0[text] }) { return known }
        guard isCompiledAccessor else { return nil }
        let count = _getParameterCount(mangledMethodName: text)
        guard count >= 0 else { return nil }
        // Only names of compiled accessors are kept: as many as the process has, whatever a peer sends.
        Self.compiled.withLock { $0[text] = Int(count) }
        return Int(count)
    }

    /// The parameter counts of the compiled accessors found so far, by name: the runtime
    /// demangles the whole name to count them, on every call otherwise.
    private static let compiled = Mutex<[String: Int]>([:])

    /// Whether the process has a distributed accessor of exactly this name (a lookup by name
    /// that demangles nothing). A contract stub's methods are generic over the protocol's
    /// `Self`, so theirs have a generic environment.
    private var isCompiledAccessor: Bool {
        var name = text
        return name.withUTF8 { utf8 in
            guard let start = utf8.baseAddress else { return false }
            return _getGenericEnvironmentOfDistributedTarget(start, UInt(utf8.count)) != nil
        }
    }
}
