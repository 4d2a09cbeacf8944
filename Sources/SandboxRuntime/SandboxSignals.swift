import CSandboxShim
import Glibc
import SandboxSystem

/// How the supervisor signals a sandbox, in one place (the sandbox's side of every signal is
/// `Sources/CSandboxShim/signals.c`).
///
/// - Requests the sandbox's init carries out and acknowledges on its control socket
///   (``Request``): suspend (SIGSTOP to every process of the sandbox, verified), resume
///   (SIGCONT to them) and a signal to the program's process group.
/// - The kill of last resort: SIGKILL to the init, whose exit ends the PID namespace and with
///   it every process of the sandbox. Through a pidfd opened while the init is known to run
///   (``killInit(pid:controlFD:)``), through the launch's own pidfd (``kill(pidfd:)``), or by
///   pid while the init is this process's unreaped child (``kill(unreapedChild:)``).
/// - Which signals `extsandbox exec` passes on to the program (``forwardedToProgram``).
package enum SandboxSignals {
    /// A request the sandbox's init carries out and acknowledges (control.c, with signals.c).
    package enum Request: Sendable, Equatable {
        /// SIGSTOP to every other process of the sandbox, acknowledged once each is seen stopped.
        case suspend
        /// SIGCONT to every other process of the sandbox.
        case resume
        /// This signal to the program's process group (it leads its own session). A number
        /// that is not a signal sends nothing.
        case signal(Int32)

        /// The control message's type; its acknowledgement carries it back.
        var messageType: UInt32 {
            switch self {
            case .suspend: return UInt32(XSB_MSG_SUSPEND.rawValue)
            case .resume: return UInt32(XSB_MSG_RESUME.rawValue)
            case .signal: return UInt32(XSB_MSG_SIGNAL.rawValue)
            }
        }

        var value: Int32 {
            if case .signal(let number) = self { return number }
            return 0
        }
    }

    /// Sends `request` on the init's control socket `control`. 0 or -errno.
    static func send(_ request: Request, on control: FileDescriptor) -> Int32 {
        xsb_send_msg(control.rawValue, request.messageType, request.value)
    }

    /// SIGKILL to the init `pid` if it still runs (its control socket `controlFD` is open and
    /// has not hung up). Returns false when it has ended (or is ending) already.
    ///
    /// The host holds no pidfd per sandbox (InitProcess.swift): one is opened here, *before*
    /// the check that the control socket is still up, so the signal can never reach another
    /// process that took the pid.
    @discardableResult
    static func killInit(pid: pid_t, controlFD: FileDescriptor?) -> Bool {
        guard let pidfd = InitProcess.openPidfd(pid) else { return false }  // ESRCH: reaped already
        defer { pidfd.close() }
        // Checked after the open: the pidfd is the init's exactly when the init still ran then.
        guard let controlFD, !InitProcess.hungUp(controlFD) else { return false }
        return kill(pidfd: pidfd.rawValue)
    }

    /// SIGKILL to the init behind `pidfd` (a launch's, which it holds until the host has the
    /// sandbox). Returns false when it could not be sent.
    @discardableResult
    static func kill(pidfd: Int32) -> Bool {
        xsb_pidfd_send_signal(pidfd, SIGKILL) == 0
    }

    /// SIGKILL to the init `pid`, which must be this process's unreaped child (its pid is then
    /// still its own).
    static func kill(unreapedChild pid: pid_t) {
        _ = Glibc.kill(pid, SIGKILL)
    }

    /// The signals `extsandbox exec` passes on to the program's process group: the terminal's
    /// Ctrl-C and Ctrl-\ reach only the CLI (the program leads a session of its own), and the
    /// CLI outlives them to report how the program ended.
    package static let forwardedToProgram: [Int32] = [SIGINT, SIGTERM, SIGHUP, SIGQUIT]
}
