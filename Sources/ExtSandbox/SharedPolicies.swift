import SandboxPolicy
import Synchronization

/// One copy of each resolved policy for every process launched under it.
///
/// Every handle resolves its point's policy afresh (``ProcessReuseKey``: an edited policy must
/// take effect at the next launch), and every running extension keeps its key, so each held a
/// copy of its own: about 15 KiB for `hardened` (the rules, their justifications), a fifth of
/// the host's memory per extension (issue 14). A policy equal to one resolved before is replaced
/// by that one, whose storage all of them share; an edited policy is not equal, and gets its own.
enum SharedPolicies {
    /// The most distinct policies remembered; the least recently used one goes first.
    static let capacity = 16

    private static let recent = Mutex<[Policy]>([])

    /// `policy`, or the equal one resolved before it (which then shares its storage).
    static func shared(_ policy: Policy) -> Policy {
        recent.withLock { recent in
            if let index = recent.firstIndex(of: policy) {
                let found = recent.remove(at: index)
                recent.insert(found, at: 0)
                return found
            }
            recent.insert(policy, at: 0)
            if recent.count > capacity { recent.removeLast() }
            return policy
        }
    }
}
