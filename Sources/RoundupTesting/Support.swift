public import Foundation
import NIOCore
import NIOPosix

/// Helpers for tests and benchmarks that run the real pieces: processes, ports, paths.
public enum TestSupport {
    /// A loopback TCP port nothing listens on right now (a bind to it succeeded and was released).
    public static func freePort() throws -> Int {
        // Chosen below the kernel's ephemeral range: a port from that range can be handed to any outgoing connection
        // (the tests' own HTTP, Redis and PostgreSQL clients) between this choice and the server's bind, which then
        // fails with "Address already in use" (seen in CI); connect() never assigns a port below the range.
        let low = ephemeralRangeStart
        if low > 11_000 {
            for _ in 0..<200 {
                let port = Int.random(in: 10_000..<low)
                if let bound = try? bind(port: port) {
                    try bound.close().wait()
                    return port
                }
            }
        }
        let channel = try bind(port: 0)
        let port = channel.localAddress!.port!
        try channel.close().wait()
        return port
    }

    private static func bind(port: Int) throws -> any Channel {
        try ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .bind(host: "127.0.0.1", port: port).wait()
    }

    /// The first port of the range the kernel assigns to outgoing connections (Linux: ip_local_port_range).
    private static let ephemeralRangeStart: Int = {
        if let text = try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8),
            let first = text.split(whereSeparator: \.isWhitespace).first, let value = Int(first)
        {
            return value
        }
        return 49_152  // the IANA range, which macOS uses
    }()

    /// Where `swift build` put the executables: `ROUNDUP_BIN_DIR`, else beside the running test binary.
    public static var binDirectory: URL {
        if let dir = ProcessInfo.processInfo.environment["ROUNDUP_BIN_DIR"], !dir.isEmpty { return URL(fileURLWithPath: dir) }
        var url = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
        // Inside an .xctest bundle on some platforms: climb out of it.
        while url.path.contains(".xctest") { url = url.deletingLastPathComponent() }
        return url
    }

    /// The repository's root (for fixtures): `ROUNDUP_SOURCE_ROOT`, else found from this file's path.
    public static var sourceRoot: URL {
        if let dir = ProcessInfo.processInfo.environment["ROUNDUP_SOURCE_ROOT"], !dir.isEmpty { return URL(fileURLWithPath: dir) }
        return URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    }

    /// `../shared/trello-fixtures` beside the repository, or `ROUNDUP_FIXTURES`.
    public static var fixturesDirectory: URL {
        if let dir = ProcessInfo.processInfo.environment["ROUNDUP_FIXTURES"], !dir.isEmpty { return URL(fileURLWithPath: dir) }
        return sourceRoot.deletingLastPathComponent().appendingPathComponent("shared/trello-fixtures")
    }

    public static func temporaryDirectory(_ name: String) throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("roundup-\(name)-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    /// Polls until the condition holds or the time is up.
    public static func eventually(
        timeout: Duration = .seconds(20), interval: Duration = .milliseconds(50), _ condition: () async throws -> Bool
    ) async rethrows -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if try await condition() { return true }
            try? await Task.sleep(for: interval)
        }
        return try await condition()
    }
}

/// A child process with its output in a log file; killed when stopped or released.
/// Spawned with posix_spawn and an empty signal mask: a test runner's threads may block SIGTERM, and a
/// child inheriting that mask would never see the SIGTERM a graceful-shutdown test sends it.
public final class ManagedProcess: @unchecked Sendable {
    // @unchecked: the mutable exit status is guarded by `lock`.
    public let pid: pid_t
    public let logFile: URL
    public let name: String
    private let lock = NSLock()
    private var status: Int32?

    /// `descriptors` are open in the child under other numbers (this process's descriptor → the child's): a pipe to
    /// talk to it beside its standard streams.
    public init(
        name: String, executable: URL, arguments: [String] = [], environment: [String: String] = [:], logDirectory: URL,
        descriptors: [(parent: Int32, child: Int32)] = []
    ) throws {
        self.name = name
        logFile = logDirectory.appendingPathComponent("\(name).log")
        var env = ProcessInfo.processInfo.environment
        for (k, v) in environment { env[k] = v }

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, logFile.path, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        for descriptor in descriptors { posix_spawn_file_actions_adddup2(&actions, descriptor.parent, descriptor.child) }

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGCHLD] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        let argv = ([executable.path] + arguments).map { strdup($0) } + [nil]
        let envp = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var child: pid_t = 0
        let result = posix_spawn(&child, executable.path, &actions, &attributes, argv, envp)
        guard result == 0 else {
            throw NSError(
                domain: "ManagedProcess", code: Int(result),
                userInfo: [NSLocalizedDescriptionKey: "cannot start \(executable.path): \(String(cString: strerror(result)))"])
        }
        pid = child
    }

    /// The exit status (or 128 + signal), once the process has ended.
    public var exitCode: Int32? {
        lock.withLock {
            if status != nil { return status }
            var raw: Int32 = 0
            if waitpid(pid, &raw, WNOHANG) == pid {
                let signal = raw & 0x7f
                status = signal == 0 ? (raw >> 8) & 0xff : 128 + signal
            }
            return status
        }
    }

    public var isRunning: Bool { exitCode == nil }

    public func signal(_ signal: Int32) {
        if isRunning { kill(pid, signal) }
    }

    /// Waits for the process to exit, up to the timeout; returns its exit status.
    @discardableResult
    public func wait(timeout: Duration = .seconds(20)) async -> Int32? {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let code = exitCode { return code }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return exitCode
    }

    /// SIGTERM, then SIGKILL if the process has not exited within `grace`.
    public func stop(grace: Duration = .seconds(10)) async {
        signal(SIGTERM)
        if await wait(timeout: grace) == nil { signal(SIGKILL) }
        _ = await wait(timeout: .seconds(5))
    }

    public var output: String { (try? String(contentsOf: logFile, encoding: .utf8)) ?? "" }

    deinit {
        if exitCode == nil {
            kill(pid, SIGKILL)
            var raw: Int32 = 0
            waitpid(pid, &raw, 0)
        }
    }
}

extension TestSupport {
    /// A throwaway CA and a server certificate it signed for 127.0.0.1 and localhost, made with openssl in `directory`:
    /// `ca.crt`, `server.crt`, `server.key`.
    public static func makeTestCertificates(in directory: URL, name: String) throws {
        let script = """
            set -e; cd '\(directory.path)'
            openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 1 -subj /CN=\(name)-ca 2>/dev/null
            openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1 2>/dev/null
            printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > ext.cnf
            openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 1 -extfile ext.cnf 2>/dev/null
            """
        let openssl = Process()
        openssl.executableURL = URL(fileURLWithPath: "/bin/sh")
        openssl.arguments = ["-c", script]
        try openssl.run()
        openssl.waitUntilExit()
        guard openssl.terminationStatus == 0 else { throw StackError("openssl could not make test certificates in \(directory.path)") }
    }
}
