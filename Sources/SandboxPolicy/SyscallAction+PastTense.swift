extension SyscallAction {
    /// "allowed", "killed", "logged", "failing with EPERM".
    package var pastTense: String {
        switch self {
        case .allow: return "allowed"
        case .killProcess: return "killed"
        case .log: return "logged"
        case .errno: return "failing with \(description.dropFirst(6))"
        }
    }
}
