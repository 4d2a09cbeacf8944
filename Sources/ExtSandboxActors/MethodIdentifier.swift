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

    /// The method resolved for objects of `actorType` if it is a distributed method of
    /// `contract`; nil if not (another type's, or no method at all). Throws when it is a
    /// compiled method whose types do not resolve for `actorType`.
    func resolved(in contract: Contract, for actorType: any DistributedActor.Type) throws(ExecuteDistributedTargetError) -> ResolvedMethod? {
        // Compared as bytes: `hasPrefix` on `String` walks grapheme boundaries, and a mangled
        // name is ASCII (an identifier equal only up to Unicode equivalence is no accessor's).
        guard text.utf8.starts(with: contract.prefix.utf8), text.utf8.suffix(2).elementsEqual("TE".utf8) else { return nil }
        let key = Key(actorType: ObjectIdentifier(actorType), name: text)
        if let known = Self.resolved.withLock({ $0[key] }) { return known }
        guard isCompiledAccessor else { return nil }
        let method = try ResolvedMethod.resolve(text, for: actorType)
        // Only names of compiled accessors are kept: as many as the process has, whatever a peer sends.
        Self.resolved.withLock { $0[key] = method }
        return method
    }

    private struct Key: Hashable {
        let actorType: ObjectIdentifier
        let name: String
    }

    /// The compiled methods resolved so far, by object type and name: resolving demangles the
    /// whole name several times, on every call otherwise.
    private static let resolved = Mutex<[Key: ResolvedMethod]>([:])

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
