import CMechanismSupport
import Glibc
import Testing

/// rlimits.c: the payload sets the policy's limits, exactly; one the kernel refuses fails the
/// step, naming the resource's number.
@Suite("Resource limits")
struct ResourceLimitTests {
    static let infinity = UInt64.max

    @Test("every limit is set as given", arguments: [
        [xsb_rlimit(resource: Int32(XSB_RLIMIT_NOFILE), soft: 64, hard: 128)],
        [xsb_rlimit(resource: Int32(XSB_RLIMIT_CORE), soft: 0, hard: 0), xsb_rlimit(resource: Int32(XSB_RLIMIT_NPROC), soft: 100, hard: 200),
         xsb_rlimit(resource: Int32(XSB_RLIMIT_FSIZE), soft: 1 << 20, hard: 1 << 30), xsb_rlimit(resource: Int32(XSB_RLIMIT_AS), soft: 1 << 32, hard: infinity)],
        [xsb_rlimit(resource: Int32(XSB_RLIMIT_CPU), soft: 10, hard: 10), xsb_rlimit(resource: Int32(XSB_RLIMIT_NICE), soft: 0, hard: 0),
         xsb_rlimit(resource: Int32(XSB_RLIMIT_RTPRIO), soft: 0, hard: 0)],
        [],
    ])
    func applied(_ limits: [xsb_rlimit]) throws {
        let out = try outcome { xsbt_apply_rlimits(limits, Int32(limits.count), $0) }
        try #require(out.ranThrough, "\(out.failure)")
        let numbers = out.numbers
        for (index, limit) in limits.enumerated() {
            #expect(UInt64(bitPattern: numbers[2 * index]) == limit.soft && UInt64(bitPattern: numbers[2 * index + 1]) == limit.hard,
                    "resource \(limit.resource)")
        }
    }

    @Test("a limit the kernel refuses fails the step, naming the resource", arguments: [
        (xsb_rlimit(resource: Int32(XSB_RLIMIT_NOFILE), soft: 129, hard: 128), "resource 07", EINVAL),
        (xsb_rlimit(resource: Int32(XSB_RLIMIT_CORE), soft: infinity, hard: 1), "resource 04", EINVAL),
        (xsb_rlimit(resource: 99, soft: 1, hard: 1), "resource 99", EINVAL),
    ] as [(xsb_rlimit, String, Int32)])
    func refused(limit: xsb_rlimit, detail: String, errno: Int32) throws {
        // A good limit first: the one after it still fails the launch.
        let limits = [xsb_rlimit(resource: Int32(XSB_RLIMIT_CPU), soft: 10, hard: 10), limit]
        let out = try outcome { xsbt_apply_rlimits(limits, Int32(limits.count), $0) }
        #expect(out.failed(at: XSB_STEP_RLIMIT) && out.failed_errno == errno && out.detail == detail, "\(out.failure)")
    }
}
