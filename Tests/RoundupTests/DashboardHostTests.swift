import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import RoundupRedis
import RoundupRuntime
import RoundupTesting
import Testing

@testable import RoundupDashboard

/// The dashboard without a password answers only loopback Host names: a page whose DNS name is re-pointed at 127.0.0.1
/// (DNS rebinding) is refused before any page or form token is served. With a password, any name, as before.
struct DashboardHostTests {
    @Test func onlyLoopbackNamesAreLoopbackHosts() {
        let accepted = [
            "127.0.0.1", "127.0.0.1:9180", "127.0.0.1:1", "127.0.0.1:65535", "localhost", "localhost:9180", "LOCALHOST:8080", "LocalHost",
            "[::1]", "[::1]:9180",
        ]
        for authority in accepted { #expect(DashboardGuard.isLoopbackHost(authority), "\(authority)") }
        let refused: [String?] = [
            nil, "", ":9180", "evil.example", "evil.example:9180", "127.0.0.1.evil.example", "127.0.0.1.evil.example:9180",
            "localhost.evil.example", "localhost.evil.example:9180", "evil.example.localhost", "127.0.0.2", "127.0.0.2:9180", "0.0.0.0:9180",
            "[::1]x", "[::1]x:9180", "[::1]:", "[::2]:9180", "::1", "localhost:", "localhost:abc", "localhost:123456", "localhost:-1",
            "localhost:9180:9180", "localhost :9180", "127.0.0.1:٩١٨٠", "localhost.", "user@localhost:9180",
        ]
        for authority in refused { #expect(!DashboardGuard.isLoopbackHost(authority), "\(authority ?? "nil")") }
    }

    @Test func withoutAPasswordAForeignHostIsRefusedBeforeAnyPage() async throws {
        try await Self.withDashboard(password: nil) { client, dashboard, pauses in
            // A rebound name: refused, with the security headers, and nothing of the page or its token.
            let rebound = try await Self.get(client, "/", host: "rebind.example:7300")
            #expect(rebound.status == .forbidden)
            #expect(rebound.body.contains("ROUNDUP_DASHBOARD_TOKEN") && rebound.body.contains("loopback"), "\(rebound.body)")
            #expect(!rebound.body.contains(dashboard.csrf) && !rebound.body.contains("csrf") && !rebound.body.contains("<html"))
            #expect(rebound.headers[.contentSecurityPolicy]?.contains("default-src 'none'") == true)
            #expect(rebound.headers[HTTPField.Name("X-Frame-Options")!] == "DENY")
            #expect(rebound.headers[.cacheControl] == "no-store")
            for path in ["/dead-letters", "/pending", "/jobs", "/queues.json", "/static/dashboard.css"] {
                #expect(try await Self.get(client, path, host: "rebind.example:7300").status == .forbidden, "\(path)")
            }
            for host in ["127.0.0.1.rebind.example:7300", "localhost.rebind.example", "127.0.0.2:7300"] {
                #expect(try await Self.get(client, "/", host: host).status == .forbidden, "\(host)")
            }
            // The health check says only that the process answers, under any name.
            #expect(try await Self.get(client, "/healthz", host: "rebind.example:7300").status == .ok)

            // Loopback names: the page, with its token, as before.
            let local = try await Self.get(client, "/", host: "127.0.0.1:7300")
            #expect(local.status == .ok && local.body.contains("<h1>Streams</h1>") && local.body.contains(dashboard.csrf))
            #expect(try await Self.get(client, "/", host: "localhost:7300").status == .ok)
            #expect(try await Self.get(client, "/", host: "[::1]:7300").status == .ok)

            // A form from the rebound page: same-origin as far as its browser knows, with the right token; refused.
            let posted = try await Self.postPause(client, host: "rebind.example:7300", csrf: dashboard.csrf)
            #expect(posted.status == .forbidden && !posted.body.contains(dashboard.csrf))
            #expect(posted.headers[.contentSecurityPolicy] != nil)
            #expect(try await pauses.current()[.jobs] == nil)
            // The same form on a loopback name pauses (the answer is the redirect, or the page it leads to).
            let local2 = try await Self.postPause(client, host: "127.0.0.1:7300", csrf: dashboard.csrf)
            #expect(local2.status == .seeOther || local2.status == .ok, "\(local2.status) \(local2.body)")
            #expect(try await pauses.current()[.jobs] != nil)
        }
    }

    @Test func withAPasswordAnyHostIsAnsweredAsBefore() async throws {
        let password = "dashboard-password-0123456789"
        try await Self.withDashboard(password: password) { client, dashboard, _ in
            let basic = "Basic " + Data("ops:\(password)".utf8).base64EncodedString()
            let good = try await Self.get(client, "/", host: "dashboard.example.com", authorization: basic)
            #expect(good.status == .ok && good.body.contains("<h1>Streams</h1>") && good.body.contains(dashboard.csrf))
            #expect(good.headers[.contentSecurityPolicy]?.contains("default-src 'none'") == true)
            let none = try await Self.get(client, "/", host: "dashboard.example.com")
            #expect(none.status == .unauthorized && none.headers[.wwwAuthenticate]?.hasPrefix("Basic") == true)
            #expect(!none.body.contains(dashboard.csrf))
        }
    }

    // MARK: Helpers

    struct Answer: Sendable {
        var status: HTTPResponse.Status
        var headers: HTTPFields
        var body: String
    }

    static func get(_ client: any TestClientProtocol, _ path: String, host: String, authorization: String? = nil) async throws -> Answer {
        var headers = HTTPFields()
        headers[HTTPField.Name("Host")!] = host
        if let authorization { headers[.authorization] = authorization }
        let response = try await client.execute(uri: path, method: .get, headers: headers, body: nil)
        return Answer(status: response.status, headers: response.headers, body: String(buffer: response.body))
    }

    /// The overview's Pause button for the jobs stream, as a browser on a page of `host` sends it.
    static func postPause(_ client: any TestClientProtocol, host: String, csrf: String) async throws -> Answer {
        var headers = HTTPFields()
        headers[HTTPField.Name("Host")!] = host
        headers[.origin] = "http://" + host
        headers[HTTPField.Name("Sec-Fetch-Site")!] = "same-origin"
        headers[.contentType] = "application/x-www-form-urlencoded"
        let response = try await client.execute(
            uri: "/streams/jobs/pause", method: .post, headers: headers, body: ByteBuffer(string: "csrf=\(csrf)&back=/"))
        return Answer(status: response.status, headers: response.headers, body: String(buffer: response.body))
    }

    /// The dashboard's router in this process behind a real socket (`.ahc`: AsyncHTTPClient sends the Host given and the
    /// server's HTTP/1 parser makes it the request's authority, as under `roundupctl dashboard`), over a new SQLite store
    /// and the test Redis under a prefix of its own (`ROUNDUP_TEST_REDIS_URL`, or a private redis-server).
    static func withDashboard(
        password: String?, _ body: @Sendable (any TestClientProtocol, Dashboard, StreamPauses) async throws -> Void
    ) async throws {
        let (store, databaseURL) = try await TestStore.make(.sqlite, "dashboard")
        var privateRedis: RedisServer?
        let redisURL: String
        if let shared = ProcessInfo.processInfo.environment["ROUNDUP_TEST_REDIS_URL"], !shared.isEmpty {
            redisURL = shared
        } else {
            let server = try await RedisServer()
            privateRedis = server
            redisURL = server.url
        }
        var environment = [
            "ROUNDUP_REDIS_URL": redisURL, "ROUNDUP_REDIS_PREFIX": "t\(UUID().uuidString.prefix(8).lowercased()):",
            "ROUNDUP_DATABASE_URL": databaseURL,
        ]
        if let password { environment["ROUNDUP_DASHBOARD_TOKEN"] = password }
        let configuration = try RoundupConfiguration(environment: environment)
        var logger = Logger(label: "roundup.dashboard.test")
        logger.logLevel = .warning
        let redis = try RedisClient.make(configuration: configuration, logger: logger)
        let history = DashboardHistory(redis: redis, keys: configuration.redisKeys, logger: logger)
        let dashboard = Dashboard(
            options: .init(keys: configuration.redisKeys, token: configuration.dashboardToken, jobStaleSeconds: configuration.jobStaleSeconds),
            redis: redis, store: store, history: history)
        let pauses = StreamPauses(redis: redis, keys: configuration.redisKeys)
        let result: Result<Void, any Error>
        do {
            try await Application(router: dashboard.router(), logger: logger).test(.ahc(.http)) { client in
                try await body(client, dashboard, pauses)
            }
            result = .success(())
        } catch {
            result = .failure(error)
        }
        await TestStore.close(store)
        await redis.shutdown()
        if let privateRedis { await privateRedis.stop() }
        try result.get()
    }
}
