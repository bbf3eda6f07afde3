public import Foundation
import NIOCore
import RoundupRedis

/// A real `redis-server` on a free loopback port, with no persistence, for one test or benchmark.
public final class RedisServer: @unchecked Sendable {
    // @unchecked: `process` changes only in start/stop, which tests call from one task.
    public private(set) var port: Int
    public let directory: URL
    public let extraArguments: [String]
    public let tlsPort: Int?
    private var process: ManagedProcess?

    public init(extraArguments: [String] = [], tlsPort: Int? = nil) async throws {
        self.port = try TestSupport.freePort()
        self.directory = try TestSupport.temporaryDirectory("redis")
        self.extraArguments = extraArguments
        self.tlsPort = tlsPort
        // Another test may take the free port between our check and redis-server's bind: try a few.
        var attempt = 0
        while true {
            do {
                try await start()
                return
            } catch {
                attempt += 1
                await stop()
                if attempt >= 3 { throw error }
                port = try TestSupport.freePort()
            }
        }
    }

    public var url: String { "redis://127.0.0.1:\(port)/0" }

    public func start() async throws {
        let executable = ["/usr/bin/redis-server", "/usr/local/bin/redis-server"].first { FileManager.default.isExecutableFile(atPath: $0) }
        guard let executable else { throw RedisClientError(.connectionFailed, "redis-server is not installed") }
        process = try ManagedProcess(
            name: "redis-\(port)", executable: URL(fileURLWithPath: executable),
            arguments: ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", directory.path]
                + extraArguments,
            logDirectory: directory)
        let client = RedisClient(configuration: RedisConfiguration(port: port, poolSize: 1))
        let ready = await TestSupport.eventually(timeout: .seconds(10)) {
            do {
                _ = try await client.send("PING", timeout: .milliseconds(300))
                return true
            } catch let error as RedisClientError {
                return error.code == .server  // NOAUTH from a password-protected server: it is up
            } catch {
                return false
            }
        }
        await client.shutdown()
        if !ready { throw RedisClientError(.connectionFailed, "redis-server did not start: \(process?.output ?? "")") }
    }

    /// SIGKILL, as a crash: no AOF rewrite or flush on the way out.
    public func crash() async {
        process?.signal(SIGKILL)
        _ = await process?.wait(timeout: .seconds(10))
        process = nil
    }

    public func stop() async {
        await process?.stop()
        process = nil
    }

    deinit {
        process?.signal(SIGKILL)
    }
}
