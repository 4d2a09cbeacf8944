/// The host/extension wire protocol (docs/wire-protocol.md).
public enum ExtSandboxWire {}
