@testable import SandboxRuntime
import Testing

/// Where the supervisor looks for its own cgroups, from the texts of `/proc/self/mountinfo` and
/// `/proc/self/cgroup` (the checks that it may create cgroups there need the real files).
@Suite("Cgroup detection")
struct CgroupDetectionTests {
    struct Case: Sendable, CustomTestStringConvertible {
        let name: String
        let mountinfo: String
        let membership: String
        let v2: String?, memory: String?, pids: String?
        var testDescription: String { name }
    }

    static let cases = [
        Case(name: "v1 and an unused v2 (this kind of machine)", mountinfo: """
            23 1 0:21 / / rw,relatime - ext4 /dev/vda rw
            31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
            32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
            35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
            39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
            40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
            41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
            """, membership: "9:name=systemd:/\n8:pids:/\n4:memory:/api/x\n1:cpu:/\n0::/\n",
            v2: "/sys/fs/cgroup/unified/", memory: "/sys/fs/cgroup/memory/api/x", pids: "/sys/fs/cgroup/pids/"),
        Case(name: "v2 only, in a container whose cgroup is the mount's root", mountinfo: """
            600 500 0:40 /user.slice/c /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw,nsdelegate
            601 500 0:41 / /proc rw - proc proc rw
            """, membership: "0::/user.slice/c/app\n", v2: "/sys/fs/cgroup/app", memory: nil, pids: nil),
        Case(name: "controllers named together, optional fields before the dash", mountinfo: """
            35 31 0:32 / /sys/fs/cgroup/memory,pids rw shared:9 master:2 - cgroup cgroup rw,pids,memory
            """, membership: "4:memory,pids:/a\n", v2: nil, memory: "/sys/fs/cgroup/memory,pids/a", pids: "/sys/fs/cgroup/memory,pids/a"),
        Case(name: "a cgroup outside what the mount shows", mountinfo: """
            35 31 0:32 /other /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
            """, membership: "4:memory:/mine\n", v2: nil, memory: nil, pids: nil),
        Case(name: "a cgroup whose name only starts like the mount's root", mountinfo: """
            600 500 0:40 /user.slice/c /sys/fs/cgroup rw - cgroup2 cgroup2 rw
            """, membership: "0::/user.slice/c2/app\n", v2: nil, memory: nil, pids: nil),
        Case(name: "the mount's root itself", mountinfo: """
            600 500 0:40 /user.slice/c /sys/fs/cgroup rw - cgroup2 cgroup2 rw
            """, membership: "0::/user.slice/c\n", v2: "/sys/fs/cgroup", memory: nil, pids: nil),
        Case(name: "a mount point with a space, written as mountinfo escapes it", mountinfo: """
            35 31 0:32 / /sys/fs/my\\040cgroups/memory rw - cgroup cgroup rw,memory
            36 31 0:33 /a\\134b /p rw - cgroup cgroup rw,pids
            """, membership: "4:memory:/x\n3:pids:/a\\b/y\n", v2: nil, memory: "/sys/fs/my cgroups/memory/x", pids: "/p/y"),
        Case(name: "a backslash without three octal digits after it stays as it is", mountinfo: """
            35 31 0:32 / /m\\+12\\9 rw - cgroup cgroup rw,memory
            """, membership: "4:memory:/x\n", v2: nil, memory: "/m\\+12\\9/x", pids: nil),
        Case(name: "a controller only in a longer name, and malformed lines", mountinfo: """
            35 31 0:32 / /m rw - cgroup cgroup rw,memory_x
            garbage
            1 2 3 - cgroup2
            - - - - - - - -
            """, membership: "4:memory_x:/a\nbroken\n::\n", v2: nil, memory: nil, pids: nil),
    ]

    @Test("the own cgroup directories in each hierarchy", arguments: cases)
    func candidates(_ c: Case) {
        let found = CgroupSupport.candidates(mountinfo: c.mountinfo, membership: c.membership)
        #expect(found.v2 == c.v2)
        #expect(found.memory == c.memory)
        #expect(found.pids == c.pids)
    }
}
