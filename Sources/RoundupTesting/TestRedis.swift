import Foundation
public import RoundupRedis
import RoundupRuntime
public import RoundupStreams

/// A Redis for a test that talks to it directly: the suite's (`ROUNDUP_TEST_REDIS_URL`) or, without one or when
/// `private` is asked, a redis-server of its own; keys under a prefix of the test's own.
public struct TestRedis: Sendable {
    public let client: RedisClient
    public let keys: RedisKeys
    public let server: RedisServer?

    public static func make(private wanted: Bool = false) async throws -> TestRedis {
        var server: RedisServer?
        let url: String
        if !wanted, let shared = ProcessInfo.processInfo.environment["ROUNDUP_TEST_REDIS_URL"], !shared.isEmpty {
            url = shared
        } else {
            let started = try await RedisServer()
            server = started
            url = started.url
        }
        let client = RedisClient(configuration: try RedisConfiguration(url: url))
        return TestRedis(client: client, keys: RedisKeys(prefix: "t\(UUID().uuidString.prefix(8).lowercased()):"), server: server)
    }

    public func shutdown() async {
        await client.shutdown()
        await server?.stop()
    }
}
