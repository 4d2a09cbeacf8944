import ExtSandboxFuzzing
import FuzzMain

/// libFuzzer over ``FuzzTarget/dockerImport`` (`scripts/fuzz docker-import`).
@main struct DockerImportFuzzer: FuzzExecutable { static let target = FuzzTarget.dockerImport }
