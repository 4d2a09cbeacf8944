import ExtSandbox
import ExtensionCatalog
import Foundation
import Observation
import Synchronization
import Testing
import TestSupport
import TextFilterContract

// The code of Apple's ExtensionFoundation articles, as written, with only the XPC names
// replaced (`makeXPCConnection()` → `makeConnection()`, `remoteObjectProxyWithErrorHandler { … }
// as? MyRemoteInterface` → `remoteObject($MyRemoteInterface.self)`, the contract being the actors
// fixture's `TextFilter`). That this file compiles is the first test; the tests below then run it
// against a real sandboxed extension. Sources (read 2026-11):
// - "Adding support for app extensions to your app",
//   https://developer.apple.com/documentation/extensionfoundation/adding-support-for-app-extensions-to-your-app
// - "Discovering app extensions from your app",
//   https://developer.apple.com/documentation/extensionfoundation/discovering-app-extensions-from-your-app
// - `AppExtensionProcess.Configuration.init(appExtensionIdentity:onInterruption:)`,
//   https://developer.apple.com/documentation/extensionfoundation/appextensionprocess/configuration/init(appextensionidentity:oninterruption:)
// Where the articles leave out `try await` before an asynchronous initializer (Apple's are
// `async throws` too), it is written here.

// "Define your app's extension points in code": both examples.
extension AppExtensionPoint {
    @Definition
    public static var myExtensionPoint: AppExtensionPoint {
        Name("MyExtensionPoint")
    }
}

extension AppExtensionPoint {
    @Definition
    public static var greetingExtension: AppExtensionPoint {
        Name("GreetingUI")
        UserInterface(true)
        Scope(restriction: .none)
    }
}

// The point the discovery article calls `myExampleExtensionPoint`: here, the test world's open
// point, its extensions under the hardened policy.
extension AppExtensionPoint {
    @Definition
    public static var myExampleExtensionPoint: AppExtensionPoint {
        Name(ExtensionWorld.openPoint)
        Scope(restriction: .none)
        SecurityLevel(TestPaths.policiesDirectory + "/hardened.yaml")
    }
}

/// The articles' snippets, each in a function of its own; what they leave undefined
/// (`config`, `proxyObj`, the loop's body) comes in as parameters or is declared here.
enum AppleArticles {
    /// "Retrieve the current list of available app extensions".
    static func retrieveTheCurrentList() async throws -> [AppExtensionIdentity] {
        // Get one of the app's defined AppExtensionPoint types.
        let someExtensionPoint = AppExtensionPoint.myExampleExtensionPoint

        // Get a snapshot of the available app extension identities.
        let identitiesSnapshot = try await AppExtensionPoint.Monitor(someExtensionPoint).identities
        return identitiesSnapshot
    }

    /// "Detect changes to the list of available app extensions": `process` gets each update.
    static func detectChanges(of someExtensionPoint: AppExtensionPoint,
                              _ process: @escaping @Sendable ([AppExtensionIdentity]) -> Void) async throws -> (AppExtensionPoint.Monitor, Task<Void, Never>) {
        let monitor = try await AppExtensionPoint.Monitor(appExtensionPoint:someExtensionPoint)

        let identitiesUpdates = Observations { monitor.identities }
        let task = Task {
            for await update in identitiesUpdates {
                // Process the new list of app extension identities.
                process(update)
            }
        }
        return (monitor, task)
    }

    /// The monitor's other points: `addAppExtensionPoint(_:)`, named by the discovery article.
    static func monitorAdditionalPoints(_ monitor: AppExtensionPoint.Monitor) async throws {
        try await monitor.addAppExtensionPoint(.myExtensionPoint)
        try await monitor.removeAppExtensionPoint(.myExtensionPoint)
    }

    /// The configuration, as `AppExtensionProcess.Configuration`'s documentation shapes it.
    static func configuration(for identity: AppExtensionIdentity, interrupted: @escaping @Sendable () -> Void) -> AppExtensionProcess.Configuration {
        let config = AppExtensionProcess.Configuration(appExtensionIdentity: identity, onInterruption: {
            interrupted()
        })
        return config
    }

    /// "Launch an app extension and connect to it using XPC".
    static func launchAndConnect(_ config: AppExtensionProcess.Configuration) async throws -> (AppExtensionProcess, $TextFilter?) {
        var proxyObj: $TextFilter?

        // Create the app extension process and an XPC connection to it.
        let appExtProcess = try await AppExtensionProcess(configuration: config)
        let xpcConnection = try await appExtProcess.makeConnection()

        // Get the proxy object for communicating with the app extension.
        proxyObj = try xpcConnection.remoteObject($TextFilter.self)
        return (appExtProcess, proxyObj)
    }

    /// `AppExtensionProcess.init(configuration:) throws`, ExtensionFoundation's synchronous
    /// initializer, from synchronous code.
    static func launchSynchronously(_ config: AppExtensionProcess.Configuration) throws -> AppExtensionProcess {
        let appExtProcess = try AppExtensionProcess(configuration: config)
        return appExtProcess
    }
}

/// Apple's articles' code, run: discovery, observation and a typed call into a sandboxed
/// extension, with the host bound to a test world (``AppExtensionHost/current``).
@Suite("Apple's articles, as written")
struct AppleArticleTests {
    init() {
        TextFilterContract.register()
    }

    static func host(_ world: ExtensionWorld) -> AppExtensionHost {
        AppExtensionHost(identifier: ExtensionWorld.hostIdentifier, locations: world.locations)
    }

    /// Installs the actors fixture in `world` (outside the host's bundle: unapproved).
    static func installActors(_ identifier: String, in world: ExtensionWorld) throws -> String {
        try world.install(identifier, executableSource: HostFixtures.productsDirectory + "/xsb-actors-extension")
    }

    static func approve(_ bundle: String, _ identifier: String, in world: ExtensionWorld) throws {
        let approval = try ExtensionCatalog.currentApproval(of: try BundleValidator.validate(bundleAt: bundle).get())
        _ = try ApprovalStore(path: world.stateFile).update { $0.approvals[identifier] = approval }
    }

    @Test("the articles' definitions are ours")
    func definitions() {
        #expect(AppExtensionPoint.myExtensionPoint == AppExtensionPoint(name: "MyExtensionPoint"))
        #expect(AppExtensionPoint.greetingExtension == AppExtensionPoint(name: "GreetingUI", hasUserInterface: true, scope: .init(restriction: .none)))
    }

    @Test("discover, launch, call: the articles' code against the sandboxed actors fixture")
    func discoverLaunchAndCall() async throws {
        let world = try ExtensionWorld()
        let bundle = try Self.installActors("org.example.filter", in: world)
        try Self.approve(bundle, "org.example.filter", in: world)
        let interruptions = Atomic<Int>(0)
        try await AppExtensionHost.$current.withValue(Self.host(world)) {
            let identities = try await AppleArticles.retrieveTheCurrentList()
            #expect(identities.map(\.bundleIdentifier) == ["org.example.filter"])
            let identity = try #require(identities.first)
            #expect(identity.hostIdentifier == ExtensionWorld.hostIdentifier)

            let config = AppleArticles.configuration(for: identity) { interruptions.add(1, ordering: .relaxed) }
            #expect(config.appExtensionIdentity == identity)
            let (process, proxy) = try await AppleArticles.launchAndConnect(config)
            defer { process.invalidate() }
            let filter = try #require(proxy)
            #expect(try await filter.apply("hello", options: FilterOptions()) == "HELLO")

            // The no-argument interruption handler runs once when the process dies.
            await #expect(throws: (any Error).self) { try await filter.crash() }
            #expect(await HostFixtures.eventually { interruptions.load(ordering: .relaxed) == 1 })
        }
    }

    @Test("the synchronous init(configuration:) launches and reuses a process as the asynchronous one does; a failed launch throws")
    func synchronousInitializer() async throws {
        let world = try ExtensionWorld()
        let bundle = try Self.installActors("org.example.filter", in: world)
        try Self.approve(bundle, "org.example.filter", in: world)
        let identity = try #require(try await AppExtensionHost.$current.withValue(Self.host(world)) {
            try await AppleArticles.retrieveTheCurrentList().first
        })
        let config = AppExtensionProcess.Configuration(appExtensionIdentity: identity)
        // Synchronous code blocks its thread: a thread of its own, as a command-line host's main.
        let process = try await offThePool { try AppleArticles.launchSynchronously(config) }
        defer { process.invalidate() }
        let filter = try await process.makeConnection().remoteObject($TextFilter.self)
        #expect(try await filter.apply("sync", options: FilterOptions()) == "SYNC")
        let again = try await offThePool { try AppleArticles.launchSynchronously(config) }
        defer { again.invalidate() }
        #expect(again.sandbox.pid == process.sandbox.pid)
        // From a task on the cooperative pool: refused, never a blocked pool thread.
        let fromTask = await Task.detached { try AppleArticles.launchSynchronously(config) }.result
        #expect { try fromTask.get() } throws: { error in
            guard case ExtensionError.blockingLaunchRefused = error else { return false }
            return true
        }

        // An extension that exits before READY: the same error as the asynchronous initializer's.
        let quitter = AppExtensionIdentity.developmentOnly(
            bundleIdentifier: "org.example.quitter", executablePath: "/bin/true",
            point: AppExtensionPoint(name: "org.extsandbox.test", securityLevel: TestPaths.policiesDirectory + "/standard.yaml"))
        let quitting = AppExtensionProcess.Configuration(appExtensionIdentity: quitter)
        await #expect {
            _ = try await offThePool { try AppleArticles.launchSynchronously(quitting) }
        } throws: { error in
            guard case ExtensionError.endedBeforeReady(.exited(code: 0)) = error else { return false }
            return true
        }
    }

    @Test("the articles' Observations { monitor.identities } sees an approval, and the points added and removed")
    func observationsSeeAnApproval() async throws {
        let world = try ExtensionWorld()
        let bundle = try Self.installActors("org.example.filter", in: world)
        let updates = Mutex<[[String]]>([])
        let (monitor, task) = try await AppExtensionHost.$current.withValue(Self.host(world)) {
            try await AppleArticles.detectChanges(of: .myExampleExtensionPoint) { update in
                updates.withLock { $0.append(update.map(\.bundleIdentifier)) }
            }
        }
        defer { task.cancel(); monitor.cancel() }
        #expect(await HostFixtures.eventually { updates.withLock { $0 } == [[]] })  // the current list first
        try Self.approve(bundle, "org.example.filter", in: world)
        #expect(await HostFixtures.eventually { updates.withLock { $0.last } == ["org.example.filter"] })
        try await AppleArticles.monitorAdditionalPoints(monitor)
        #expect(monitor.points.map(\.name) == [ExtensionWorld.openPoint])
    }

    @Test("withObservationTracking on identities fires when a bundle is approved, and the handler reads the new list")
    func trackingFiresOnApproval() async throws {
        let world = try ExtensionWorld()
        let monitor = try await AppExtensionPoint.Monitor(appExtensionPoint: .myExampleExtensionPoint, host: Self.host(world))
        defer { monitor.cancel() }
        let seen = Mutex<[String]?>(nil)
        let stateChanges = Atomic<Int>(0)
        withObservationTracking { _ = monitor.identities } onChange: {
            seen.withLock { $0 = monitor.identities.map(\.bundleIdentifier) }
        }
        withObservationTracking { _ = monitor.state } onChange: { stateChanges.add(1, ordering: .relaxed) }

        // Installed but unapproved: the state changes (a count), the identities do not.
        let bundle = try Self.installActors("org.example.filter", in: world)
        // (The first change may be a half-written bundle: tracking fires once, for the first.)
        #expect(await HostFixtures.eventually { stateChanges.load(ordering: .relaxed) == 1 })
        #expect(await HostFixtures.eventually { monitor.state.unapprovedCount == 1 })
        #expect(seen.withLock { $0 } == nil)

        try Self.approve(bundle, "org.example.filter", in: world)
        #expect(await HostFixtures.eventually { seen.withLock { $0 } != nil })
        #expect(seen.withLock { $0 } == ["org.example.filter"])
    }

    @Test("a host with no arguments is this process: the documented default identifier and bundle")
    func defaultHost() {
        let host = AppExtensionHost()
        #expect(host.identifier == AppExtensionHost.defaultIdentifier())
        let environment = ProcessInfo.processInfo.environment
        let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        if environment["EXTSANDBOX_HOST_IDENTIFIER"] == nil {
            #expect(host.identifier == "local." + executable.lastPathComponent)
        }
        if environment["EXTSANDBOX_HOST_BUNDLE"] == nil {
            #expect(host.locations.hostBundle == executable.deletingLastPathComponent().path)
        }
        #expect(AppExtensionHost.current == host)
    }
}
