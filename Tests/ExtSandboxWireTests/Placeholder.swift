import Testing
@testable import ExtSandboxWire
