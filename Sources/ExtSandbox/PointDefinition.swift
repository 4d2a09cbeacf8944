/// One part of a point's definition (``AppExtensionPoint/Definition``).
public protocol AppExtensionPointDefinitionPart: Sendable {
    func apply(to point: inout AppExtensionPoint)
}

extension AppExtensionPoint {
    /// Defines a point declaratively, as ExtensionFoundation's `@Definition` does:
    ///
    /// ```swift
    /// extension AppExtensionPoint {
    ///     @Definition static var importer: AppExtensionPoint {
    ///         Name("com.example.editor.importer")
    ///         UserInterface(false)
    ///         Scope(restriction: .none)        // extensions installed anywhere (owner-approved)
    ///         SecurityLevel("hardened")        // Apple's EnhancedSecurity
    ///     }
    /// }
    /// ```
    ///
    /// `Name` is required; the others default to no user interface, `.application` scope and
    /// the `standard` level.
    @resultBuilder
    public enum Definition {
        public static func buildExpression(_ part: some AppExtensionPointDefinitionPart) -> [any AppExtensionPointDefinitionPart] { [part] }
        public static func buildBlock(_ parts: [any AppExtensionPointDefinitionPart]...) -> [any AppExtensionPointDefinitionPart] { parts.flatMap { $0 } }
        public static func buildFinalResult(_ parts: [any AppExtensionPointDefinitionPart]) -> AppExtensionPoint {
            var point = AppExtensionPoint(name: "")
            for part in parts { part.apply(to: &point) }
            precondition(!point.name.isEmpty, "an extension point definition needs a Name(\"…\")")
            return point
        }
    }

    /// The point's reverse-DNS name.
    public struct Name: AppExtensionPointDefinitionPart {
        public var value: String
        public init(_ value: String) { self.value = value }
        public func apply(to point: inout AppExtensionPoint) { point.name = value }
    }

    /// Whether the point's extensions have a user interface.
    public struct UserInterface: AppExtensionPointDefinitionPart {
        public var value: Bool
        public init(_ value: Bool) { self.value = value }
        public func apply(to point: inout AppExtensionPoint) { point.hasUserInterface = value }
    }

    /// The policy the point's extensions run under (`standard`, `restricted`, `hardened`, …).
    public struct SecurityLevel: AppExtensionPointDefinitionPart {
        public var value: String
        public init(_ value: String) { self.value = value }
        public func apply(to point: inout AppExtensionPoint) { point.securityLevel = value }
    }
}

extension AppExtensionPoint.Scope: AppExtensionPointDefinitionPart {
    public func apply(to point: inout AppExtensionPoint) { point.scope = self }
}
