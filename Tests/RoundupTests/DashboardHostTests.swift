import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStreams
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

    /// The viewer's password shows every page without a form, and every changing request it makes is refused (403, a
    /// JSON body saying why) before anything changes, even with the page's token; the operator's password still
    /// changes things. A wrong password is neither.
    @Test func aViewerSeesEverythingAndChangesNothing() async throws {
        let password = "dashboard-password-0123456789"
        let viewer = "dashboard-viewer-0123456789"
        try await Self.withDashboard(password: password, extra: ["ROUNDUP_DASHBOARD_VIEWER_TOKEN": viewer]) { client, dashboard, pauses in
            let asViewer = "Basic " + Data("support:\(viewer)".utf8).base64EncodedString()
            let asOperator = "Basic " + Data("ops:\(password)".utf8).base64EncodedString()
            for path in ["/", "/dead-letters", "/pending", "/jobs", "/queues.json"] {
                let page = try await Self.get(client, path, host: "127.0.0.1:7300", authorization: asViewer)
                #expect(page.status == .ok, "\(path): \(page.status)")
                #expect(!page.body.contains("<form method=\"post\""), "\(path) shows a viewer a form")
            }
            let overview = try await Self.get(client, "/", host: "127.0.0.1:7300", authorization: asViewer)
            #expect(overview.body.contains("viewer: read only") && overview.body.contains("<h1>Streams</h1>"))
            let operatorsPage = try await Self.get(client, "/", host: "127.0.0.1:7300", authorization: asOperator)
            #expect(operatorsPage.body.contains("<form method=\"post\" action=\"/streams/jobs/pause\"") && !operatorsPage.body.contains("read only"))

            let refused = try await Self.postPause(client, host: "127.0.0.1:7300", csrf: dashboard.csrf, authorization: asViewer)
            #expect(refused.status == .forbidden)
            let message = try JSONParser.parse(Array(refused.body.utf8))["error"]?["message"]?.stringValue
            #expect(message?.contains("changes nothing") == true, "\(refused.body)")
            #expect(try await pauses.current()[.jobs] == nil)
            let wrong = "Basic " + Data("x:not-the-password-000000".utf8).base64EncodedString()
            #expect(try await Self.postPause(client, host: "127.0.0.1:7300", csrf: dashboard.csrf, authorization: wrong).status == .unauthorized)
            let done = try await Self.postPause(client, host: "127.0.0.1:7300", csrf: dashboard.csrf, authorization: asOperator)
            // The redirect, or the page it leads to (the test client follows it).
            #expect(done.status == .seeOther || done.status == .ok, "\(done.status) \(done.body)")
            #expect(try await pauses.current()[.jobs] != nil)
        }
    }

    /// Behind a proxy at `/ops/roundup`: every link, the stylesheet, every form and the redirect after it are under the
    /// base path; a request is answered with the base path (a proxy that passes it) and without it (one that strips it).
    @Test func underABasePathEveryLinkAssetFormAndRedirectIsUnderIt() async throws {
        try await Self.withDashboard(password: nil, extra: ["ROUNDUP_DASHBOARD_BASE_PATH": "/ops/roundup/"]) { client, dashboard, pauses in
            for path in ["/ops/roundup/", "/ops/roundup", "/"] {
                let page = try await Self.get(client, path, host: "127.0.0.1:7300")
                #expect(page.status == .ok && page.body.contains("<h1>Streams</h1>"), "\(path): \(page.status)")
                let targets = Self.attributes(["href", "action"], in: page.body)
                #expect(!targets.isEmpty)
                #expect(targets.allSatisfy { $0.hasPrefix("/ops/roundup/") }, "\(path): \(targets.filter { !$0.hasPrefix("/ops/roundup/") })")
                #expect(targets.contains("/ops/roundup/static/dashboard.css"))
            }
            for path in ["/ops/roundup/static/dashboard.css", "/ops/roundup/dead-letters?account=x", "/ops/roundup/healthz"] {
                #expect(try await Self.get(client, path, host: "127.0.0.1:7300").status == .ok, "\(path)")
            }
            #expect(try await Self.get(client, "/ops/roundupx", host: "127.0.0.1:7300").status == .notFound)
            let posted = try await Self.postPause(client, host: "127.0.0.1:7300", csrf: dashboard.csrf, path: "/ops/roundup/streams/jobs/pause")
            // The redirect, or the page it leads to (the test client follows it; the browser test sees where it lands).
            #expect(posted.status == .seeOther || (posted.status == .ok && posted.body.contains("paused jobs")), "\(posted.status)")
            #expect(try await pauses.current()[.jobs] != nil)
            let redirect = Dashboard.redirect("/dead-letters?account=a", done: "replayed", basePath: "/ops/roundup")
            #expect(redirect.headers[.location] == "/ops/roundup/dead-letters?account=a&done=replayed")
            #expect(Dashboard.redirect("//evil.example/", done: "x", basePath: "/ops/roundup").headers[.location] == "/ops/roundup/?done=x")
        }
        // Not a path: refused at start, saying what it must be. A viewer's password needs the operator's, and differs.
        let base = ["ROUNDUP_REDIS_URL": "redis://127.0.0.1:6379/0"]
        #expect(
            try RoundupConfiguration(environment: base.merging(["ROUNDUP_DASHBOARD_BASE_PATH": "/ops/round-up_1.x~"]) { $1 }).dashboardBasePath
                == "/ops/round-up_1.x~")
        for bad in ["ops", "/ops//x", "/ops/<x>", "/ops/../x", "/ops roundup", "/ops/\"x"] {
            #expect(throws: ConfigurationError.self, "\(bad)") {
                try RoundupConfiguration(environment: base.merging(["ROUNDUP_DASHBOARD_BASE_PATH": bad]) { $1 })
            }
        }
        let viewer = "dashboard-viewer-0123456789"
        for environment in [
            ["ROUNDUP_DASHBOARD_VIEWER_TOKEN": viewer], ["ROUNDUP_DASHBOARD_TOKEN": viewer, "ROUNDUP_DASHBOARD_VIEWER_TOKEN": viewer],
            ["ROUNDUP_DASHBOARD_TOKEN": "dashboard-password-0123456789", "ROUNDUP_DASHBOARD_VIEWER_TOKEN": "short"],
        ] {
            #expect(throws: ConfigurationError.self, "\(environment)") {
                try RoundupConfiguration(environment: base.merging(environment) { $1 })
            }
        }
    }

    /// Paused accounts on the overview: masked, with a Resume button that names the account by a hash, not its id; the
    /// form below pauses one by its id.
    @Test func pausedAccountsAreShownAndResumedFromTheOverview() async throws {
        try await Self.withDashboard(password: nil) { client, dashboard, pauses in
            let account = "acct-0123456789-paused"
            try await pauses.pause(account: account)
            let page = try await Self.get(client, "/", host: "127.0.0.1:7300")
            #expect(page.body.contains("data-paused-account=\"\(Dashboard.reference(account))\"") && !page.body.contains(account))
            let resumed = try await Self.post(
                client, "/accounts/resume", host: "127.0.0.1:7300", form: "csrf=\(dashboard.csrf)&account_ref=\(Dashboard.reference(account))&back=/")
            #expect(resumed.status == .seeOther || (resumed.status == .ok && resumed.body.contains("resumed account")), "\(resumed.status)")
            #expect(try await pauses.pausedAccounts().isEmpty)
            let paused = try await Self.post(
                client, "/accounts/pause", host: "127.0.0.1:7300", form: "csrf=\(dashboard.csrf)&account=\(account)&back=/")
            #expect(paused.status == .seeOther || paused.status == .ok)
            #expect(try await pauses.pausedAccounts().keys.sorted() == [account])
            let empty = try await Self.post(client, "/accounts/pause", host: "127.0.0.1:7300", form: "csrf=\(dashboard.csrf)&account=&back=/")
            #expect(empty.status == .badRequest)
            try await pauses.resume(account: account)
        }
    }

    /// A dashboard form posted as a browser on a page of `host` sends it.
    static func post(_ client: any TestClientProtocol, _ path: String, host: String, form: String) async throws -> Answer {
        var headers = HTTPFields()
        headers[HTTPField.Name("Host")!] = host
        headers[.origin] = "http://" + host
        headers[HTTPField.Name("Sec-Fetch-Site")!] = "same-origin"
        headers[.contentType] = "application/x-www-form-urlencoded"
        let response = try await client.execute(uri: path, method: .post, headers: headers, body: ByteBuffer(string: form))
        return Answer(status: response.status, headers: response.headers, body: String(buffer: response.body))
    }

    /// The values of the attributes `names` in `html` (`href="…"`).
    static func attributes(_ names: [String], in html: String) -> [String] {
        names.flatMap { name in
            html.components(separatedBy: "\(name)=\"").dropFirst().compactMap { $0.split(separator: "\"", maxSplits: 1).first.map(String.init) }
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
    static func postPause(
        _ client: any TestClientProtocol, host: String, csrf: String, authorization: String? = nil, path: String = "/streams/jobs/pause"
    ) async throws -> Answer {
        var headers = HTTPFields()
        headers[HTTPField.Name("Host")!] = host
        if let authorization { headers[.authorization] = authorization }
        headers[.origin] = "http://" + host
        headers[HTTPField.Name("Sec-Fetch-Site")!] = "same-origin"
        headers[.contentType] = "application/x-www-form-urlencoded"
        let response = try await client.execute(
            uri: path, method: .post, headers: headers, body: ByteBuffer(string: "csrf=\(csrf)&back=/"))
        return Answer(status: response.status, headers: response.headers, body: String(buffer: response.body))
    }

    /// The dashboard's router in this process behind a real socket (`.ahc`: AsyncHTTPClient sends the Host given and the
    /// server's HTTP/1 parser makes it the request's authority, as under `roundupctl dashboard`), over a new SQLite store
    /// and the test Redis under a prefix of its own (`ROUNDUP_TEST_REDIS_URL`, or a private redis-server).
    static func withDashboard(
        password: String?, extra: [String: String] = [:], _ body: @Sendable (any TestClientProtocol, Dashboard, StreamPauses) async throws -> Void
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
        environment.merge(extra) { _, new in new }
        let configuration = try RoundupConfiguration(environment: environment)
        var logger = Logger(label: "roundup.dashboard.test")
        logger.logLevel = .warning
        let redis = try RedisClient.make(configuration: configuration, logger: logger)
        let history = DashboardHistory(redis: redis, keys: configuration.redisKeys, logger: logger)
        let dashboard = Dashboard(
            options: .init(
                keys: configuration.redisKeys, token: configuration.dashboardToken, viewerToken: configuration.dashboardViewerToken,
                basePath: configuration.dashboardBasePath, jobStaleSeconds: configuration.jobStaleSeconds),
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
