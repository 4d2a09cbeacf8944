import CMechanismSupport
import Glibc
import Testing

/// seccomp.c: `xsb_seccomp_decide`, the one place the init's receiver thread decides a call the
/// filter notified, for every kind of call in every state of a launch.
@Suite("seccomp: the verdict on a notified call")
struct SeccompDecisionTests {
    struct Case: Sendable, CustomTestStringConvertible {
        let testDescription: String
        let nr: Int32
        var withdrawn = false
        var audit = false
        var superviseFirstExec = false
        var firstExecDone = false
        var execDone = false
        let verdict: xsb_notification_verdict
    }

    static let execve = Int32(XSBT_SYS_EXECVE), execveat = Int32(XSBT_SYS_EXECVEAT), ptrace = Int32(XSBT_SYS_PTRACE)

    static let cases: [Case] = [
        // "No exec after start": the launch's own execve (or execveat) runs, nothing after it.
        Case(testDescription: "the launch's own execve, supervised", nr: execve, superviseFirstExec: true, verdict: XSB_VERDICT_LET_FIRST_EXEC_RUN),
        Case(testDescription: "the launch's own execveat, supervised", nr: execveat, superviseFirstExec: true, verdict: XSB_VERDICT_LET_FIRST_EXEC_RUN),
        Case(testDescription: "the first execve in audit mode, supervised", nr: execve, audit: true, superviseFirstExec: true,
             verdict: XSB_VERDICT_LET_FIRST_EXEC_RUN),
        Case(testDescription: "a second execve, supervised", nr: execve, superviseFirstExec: true, firstExecDone: true, execDone: true,
             verdict: XSB_VERDICT_END_SANDBOX),
        Case(testDescription: "a second execve, supervised, before the vfork returned", nr: execve, superviseFirstExec: true, firstExecDone: true,
             verdict: XSB_VERDICT_END_SANDBOX),
        Case(testDescription: "a second execve in audit mode", nr: execve, audit: true, superviseFirstExec: true, firstExecDone: true,
             execDone: true, verdict: XSB_VERDICT_LET_RUN_AUDITED),
        // A policy that forbids execve itself: the launch's own exec fails the launch.
        Case(testDescription: "the launch's own execve, forbidden", nr: execve, verdict: XSB_VERDICT_FAIL_LAUNCH_EXEC),
        Case(testDescription: "the launch's own execveat, forbidden", nr: execveat, verdict: XSB_VERDICT_FAIL_LAUNCH_EXEC),
        Case(testDescription: "an execve after the launch's, forbidden", nr: execve, execDone: true, verdict: XSB_VERDICT_END_SANDBOX),
        Case(testDescription: "the launch's own execve, forbidden, in audit mode", nr: execve, audit: true, verdict: XSB_VERDICT_LET_RUN_AUDITED),
        // Any other call the filter notifies is one it kills (or audits).
        Case(testDescription: "ptrace before the exec", nr: ptrace, verdict: XSB_VERDICT_END_SANDBOX),
        Case(testDescription: "ptrace before the exec, supervised", nr: ptrace, superviseFirstExec: true, verdict: XSB_VERDICT_END_SANDBOX),
        Case(testDescription: "ptrace after the exec", nr: ptrace, superviseFirstExec: true, firstExecDone: true, execDone: true,
             verdict: XSB_VERDICT_END_SANDBOX),
        Case(testDescription: "ptrace in audit mode", nr: ptrace, audit: true, execDone: true, verdict: XSB_VERDICT_LET_RUN_AUDITED),
        Case(testDescription: "an unknown number", nr: -1, verdict: XSB_VERDICT_END_SANDBOX),
        // A call a signal withdrew before it was read: its number is unknown.
        Case(testDescription: "a withdrawn call", nr: 0, withdrawn: true, verdict: XSB_VERDICT_END_SANDBOX),
        Case(testDescription: "a withdrawn execve, supervised, before the first", nr: execve, withdrawn: true, superviseFirstExec: true,
             verdict: XSB_VERDICT_END_SANDBOX),
        Case(testDescription: "a withdrawn call in audit mode", nr: 0, withdrawn: true, audit: true, verdict: XSB_VERDICT_IGNORE),
    ]

    @Test("the verdict", arguments: cases)
    func verdict(of call: Case) {
        var state = xsb_notification_state(
            audit: call.audit ? 1 : 0, supervise_first_exec: call.superviseFirstExec ? 1 : 0,
            first_exec_done: call.firstExecDone ? 1 : 0, exec_done: call.execDone ? 1 : 0)
        #expect(xsb_seccomp_decide(call.nr, call.withdrawn ? 1 : 0, &state) == call.verdict)
    }
}

/// seccomp.c, the payload's side: memory-deny-write-execute, then the listener's number announced
/// (to the init on the status pipe, to the receiver on its own pipe), then the filter loaded with
/// its listener at exactly that number.
@Suite("seccomp: the payload's filter and listener")
struct SeccompPayloadTests {
    struct Case: Sendable, CustomTestStringConvertible {
        let testDescription: String
        var openBelow: Int32 = 3
        var limit: Int32 = 0
        var mdwe: Int32 = 0
        var noFilter: Int32 = 0
        var elsewhere: Int32 = 0
        /// The listener's number, or the failing step, errno and detail.
        var listener: Int32 = -1
        var failure: (xsb_step, Int32, String)? = nil
    }

    @Test("the listener where it was announced, or the step that failed", arguments: [
        Case(testDescription: "after stdio: 3", listener: 3),
        Case(testDescription: "after stdio and an extra fd: 4", openBelow: 4, listener: 4),
        Case(testDescription: "memory-deny-write-execute set", mdwe: 1, listener: 3),
        Case(testDescription: "an open-files limit with room for it", limit: 4, listener: 3),
        Case(testDescription: "an open-files limit without room for it", limit: 3,
             failure: (XSB_STEP_RLIMIT, EMFILE, "open-files: the program's fds and the seccomp listener need a limit of at least 4")),
        Case(testDescription: "no filter", noFilter: 1, failure: (XSB_STEP_SECCOMP, EINVAL, "no filter")),
        Case(testDescription: "a listener elsewhere than announced", elsewhere: 1, failure: (XSB_STEP_SECCOMP, EBADF, "listener fd")),
    ])
    func listener(_ filterCase: Case) throws {
        var setup = xsbt_filter_case(open_below: filterCase.openBelow, open_files_limit: filterCase.limit,
                                     memory_deny_write_execute: filterCase.mdwe, no_filter: filterCase.noFilter, expect_elsewhere: filterCase.elsewhere)
        let out = try outcome { xsbt_seccomp_payload(&setup, $0) }
        if let (step, errno, detail) = filterCase.failure {
            #expect(out.failed(at: step) && out.failed_errno == errno && out.detail == detail, "\(out.failure)")
            return
        }
        try #require(out.ranThrough, "\(out.failure)")
        let numbers = out.numbers
        #expect(numbers[0] == Int64(filterCase.mdwe), "PR_GET_MDWE")
        #expect(numbers[1] == Int64(filterCase.listener) && numbers[2] == Int64(filterCase.listener) && out.announced == filterCase.listener,
                "returned \(numbers[1]), to the receiver \(numbers[2]), to the init \(out.announced)")
        #expect(numbers[3] == 1, "a seccomp listener is open there")
    }
}
