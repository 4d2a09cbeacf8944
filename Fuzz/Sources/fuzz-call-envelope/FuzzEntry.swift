import ExtSandboxFuzzing
import FuzzMain

/// libFuzzer over ``FuzzTarget/callEnvelope`` (`scripts/fuzz call-envelope`).
@main struct CallEnvelopeFuzzer: FuzzExecutable { static let target = FuzzTarget.callEnvelope }
