import SandboxSystem

extension SandboxError {
    /// The event monitor's failure as a launch or lifecycle step reports it: step
    /// ``Step/control``, the call as the detail (`epoll_ctl add`), its `errno`.
    public init(_ failure: EventMonitor.Failure) {
        self.init(step: .control, errorNumber: failure.errorNumber, detail: failure.operation)
    }
}
