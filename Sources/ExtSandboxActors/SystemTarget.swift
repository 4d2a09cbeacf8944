/// The reserved object every implementation of the call envelope serves on every connection,
/// whatever its contract (docs/wire-protocol.md §12.4): a tool that knows no contract
/// (`extsandbox test`) can still check that a peer speaks the envelope.
///
/// Its one method, ``ping``, answers REPLY with its single argument's bytes unchanged; any other
/// method is ERROR 22 (unknown method), another number of arguments ERROR 23.
public enum SystemTarget {
    /// The target name, beside ``ExtensionActorID/host`` and ``ExtensionActorID/extension``.
    public static let name = "system"
    /// The method identifier of the echo.
    public static let ping = "ping"

    /// The envelope of a ping whose argument is `value` (an encoded value, docs/wire-protocol.md
    /// §12.2): its answer is a REPLY of exactly these bytes.
    public static func pingEnvelope(_ value: [UInt8]) throws(CallEnvelope.FormatError) -> [UInt8] {
        try CallEnvelope(target: name, method: ping, arguments: [value[...]]).encoded()
    }

    /// The answer to a call of the system target (its arguments' fds are the caller's to close).
    static func answer(_ envelope: CallEnvelope) -> CallAnswer {
        guard envelope.method == ping else {
            return .error(code: CallErrorCode.unknownMethod, message: "the system target has no method \(envelope.method)")
        }
        guard envelope.arguments.count == 1 else {
            return .error(code: CallErrorCode.undecodableArguments, message: "\(envelope.arguments.count) arguments for ping, which takes 1")
        }
        return .reply(Array(envelope.arguments[0]) + envelope.trailingBytes, fileDescriptors: [])
    }
}
