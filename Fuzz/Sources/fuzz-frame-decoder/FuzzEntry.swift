import ExtSandboxFuzzing
import FuzzMain

/// libFuzzer over ``FuzzTarget/frameDecoder`` (`scripts/fuzz frame-decoder`).
@main struct FrameDecoderFuzzer: FuzzExecutable { static let target = FuzzTarget.frameDecoder }
