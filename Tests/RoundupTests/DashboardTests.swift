import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStreams
import RoundupTesting
import Testing

/// `roundupctl dashboard` in a real headless Chromium, against a real redis-server and store: the pages render, their
/// numbers are those of `roundupctl queues --json`, the buttons pause, replay and delete, forms from elsewhere are
/// refused, nothing secret is shown, and a screenshot is written (`ROUNDUP_SCREENSHOT_DIR`, else the test's directory).
@Suite(.serialized) struct DashboardTests {
    struct Running {
        let process: ManagedProcess
        let url: String
    }

    func startDashboard(_ stack: Stack, extra: [String: String] = [:], arguments: [String] = []) async throws -> Running {
        let port = try TestSupport.freePort()
        var env = stack.environment
        for (k, v) in extra { env[k] = v }
        let process = try ManagedProcess(
            name: "dashboard-\(port)", executable: TestSupport.binDirectory.appendingPathComponent("roundupctl"),
            arguments: ["dashboard", "--port", String(port)] + arguments, environment: env, logDirectory: stack.directory)
        let url = "http://127.0.0.1:\(port)"
        let up = await TestSupport.eventually(timeout: .seconds(20)) { (try? await stack.get(port: port, "/healthz").status) == .ok }
        guard up else { throw StackError("dashboard did not come up: \(process.output)") }
        return Running(process: process, url: url)
    }

    func ctl(_ stack: Stack, _ arguments: [String]) async throws -> JSONValue {
        let process = try ManagedProcess(
            name: "ctl-\(UUID().uuidString.prefix(6))", executable: TestSupport.binDirectory.appendingPathComponent("roundupctl"),
            arguments: arguments, environment: stack.environment, logDirectory: stack.directory)
        #expect(await process.wait(timeout: .seconds(30)) == 0, "\(process.output)")
        return try JSONParser.parse(Array(process.output.utf8))
    }

    /// Entries in every state the overview shows: waiting, pending, failing with a last error that holds a credential,
    /// dead letters of two accounts, a paused push stream.
    func populate(_ stack: Stack) async throws -> [String] {
        let webhooks = RedisArgument(stack.keys.webhookStream(Self.shard))
        _ = try await stack.redis.send("XGROUP", "CREATE", webhooks, "workers", "0", "MKSTREAM")
        var ids: [String] = []
        for n in 0..<7 {
            ids.append(
                try #require(
                    try await stack.redis.send("XADD", webhooks, "*", "account", RedisArgument("account-\(n % 2)-0123456789"), "type", "updateCard")
                        .string))
        }
        _ = try await stack.redis.send("XREADGROUP", "GROUP", "workers", "worker-a", "COUNT", 3, "STREAMS", webhooks, ">")
        _ = try await stack.redis.send("XCLAIM", webhooks, "workers", "worker-b", 0, RedisArgument(ids[0]))
        _ = try await stack.redis.send(
            "HSET", RedisArgument(stack.keys.webhookErrors(Self.shard)), RedisArgument(ids[0]),
            "trello_transient\tGET https://api.trello.com/1/cards/c1?key=SECRETKEY123&token=SECRETTOKEN456 answered 502")
        let dead = RedisArgument(stack.keys.deadLetterStream(Self.shard))
        var letters: [String] = []
        for (n, account) in ["alpha-account-1", "beta-account-22", "alpha-account-1"].enumerated() {
            letters.append(
                try #require(
                    try await stack.redis.send(
                        "XADD", dead, "*", "account", RedisArgument(account), "type", "createCard", "action", RedisArgument("act-\(n)"), "body",
                        RedisArgument(#"{"action":{"id":"act-\#(n)","type":"createCard"}}"#), "error", RedisArgument("store refused event \(n)"),
                        "deliveries", "5", "failed_at", RedisArgument(String(Int(Date().timeIntervalSince1970 * 1000))), "original_id", "1-0",
                        "attempts", RedisArgument(n == 0 ? Self.attempts : "")
                    ).string))
        }
        _ = try await stack.redis.send(
            "HSET", RedisArgument(stack.keys.webhookErrors(Self.shard)), RedisArgument(StreamAttempt.field(ids[1])), RedisArgument(Self.attempts))
        try await StreamPauses(redis: stack.redis, keys: stack.keys).pause(.push)
        // As the tools name them: `<shard>:<id>`.
        return letters.map { "\(Self.shard.index):\($0)" }
    }

    /// Two failed deliveries, the first with a Trello URL whose key and token the pages must mask.
    static let attempts =
        "1700000000000\tworker-a\ttrello_transient\tGET https://api.trello.com/1/cards/c1?key=SECRETKEY123&token=SECRETTOKEN456 answered 502\n"
        + "1700000060000\tworker-b\tstore_failed\tdisk full"

    /// The webhook shard these tests fill by hand.
    static let shard = WebhookShard(index: 0)

    /// A dead letter's id in its shard's stream, from the name the tools give it.
    static func local(_ letter: String) -> RedisArgument { RedisArgument(String(letter.split(separator: ":").last ?? "")) }

    @Test func theDashboardRendersInChromiumMatchesQueuesAndItsButtonsWork() async throws {
        try #require(HeadlessBrowser.executable != nil, "chromium is not installed: scripts/test installs it")
        let stack = try await Stack(store: .sqlite)
        let letters = try await populate(stack)
        let dashboard = try await startDashboard(stack)
        let browser = try await HeadlessBrowser(directory: stack.directory)

        // The overview: one row per stream, each number as `roundupctl queues --json` has it.
        try await browser.open(dashboard.url + "/")
        let rows = try await browser.evaluate(
            """
            JSON.stringify([...document.querySelectorAll('tr[data-stream]')].map(row => {
              const o = { name: row.dataset.stream };
              row.querySelectorAll('td[data-field]').forEach(td => o[td.dataset.field] = td.textContent.trim());
              return o }))
            """)
        let shown = try JSONParser.parse(Array((rows.stringValue ?? "[]").utf8)).arrayValue ?? []
        let queues = try await ctl(stack, ["queues", "--json"])["streams"]?.arrayValue ?? []
        #expect(shown.count == 3 && queues.count == 3)
        for (row, report) in zip(shown, queues) {
            #expect(row["name"] == report["name"])
            for (field, key) in [("length", "length"), ("lag", "lag"), ("pending", "pending"), ("dead_letters", "dead_letters")] {
                let number: String
                switch report[key] {
                case .number(let value)?: number = String(Int(value))
                default: number = "–"
                }
                #expect(row[field]?.stringValue == number, "\(field) of \(row["name"] ?? .null): page \(row[field] ?? .null), queues \(number)")
            }
            #expect(row["consumers"]?.stringValue == String(report["consumers"]?.arrayValue?.count ?? -1))
            #expect(row["state"]?.stringValue?.hasPrefix(report["paused"] == .bool(true) ? "paused since" : "running") == true)
        }
        let webhooks = try #require(shown.first)
        #expect(webhooks["length"] == "7" && webhooks["lag"] == "4" && webhooks["pending"] == "3" && webhooks["dead_letters"] == "3")
        // The failing entry, its credential cut from its error; no script anywhere, and the page says it refreshes.
        let html = try await browser.evaluate("document.documentElement.outerHTML").stringValue ?? ""
        #expect(html.contains("trello_transient: GET https://api.trello.com/1/cards/c1?key=[redacted]&amp;token=[redacted] answered 502"))
        #expect(!html.contains("SECRETKEY123") && !html.contains("SECRETTOKEN456"))
        #expect(!html.contains("account-0-0123456789"), "account ids are masked")
        #expect(try await browser.evaluate("document.scripts.length") == .number(0))
        #expect(try await browser.evaluate("document.querySelector('meta[http-equiv=refresh]').content") == "5")
        #expect(try await browser.evaluate("getComputedStyle(document.querySelector('header')).display") == "flex", "the stylesheet loaded")

        let directory = ProcessInfo.processInfo.environment["ROUNDUP_SCREENSHOT_DIR"].map(URL.init(fileURLWithPath:)) ?? stack.directory
        let screenshot = directory.appendingPathComponent("dashboard-overview.png")
        try await browser.screenshot().write(to: screenshot)
        #expect(try Data(contentsOf: screenshot).prefix(8) == Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]))
        print("dashboard screenshot: \(screenshot.path)")

        // Find: the search box, by account: the account's entries where they are (delivered to a worker or waiting), and
        // another's dead letters.
        try await browser.clickAndWait("nav a[href='/find']")
        _ = try await browser.evaluate("document.querySelector('input[name=account]').value = 'account-1-0123456789'")
        try await browser.clickAndWait("form.filter button")
        #expect(try await browser.evaluate("location.search") == "?action=&card=&account=account-1-0123456789")
        #expect(
            try await browser.evaluate("[...document.querySelectorAll('tr[data-place]')].map(r => r.dataset.place).join(',')")
                == "pending,waiting,waiting")
        #expect(
            try await browser.evaluate("document.querySelector('tr[data-place=pending] td.detail').textContent").stringValue?.hasPrefix(
                "with worker-a") == true)
        // Its attempts, by whom, masked.
        #expect(
            try await browser.evaluate(
                "[...document.querySelectorAll('tr[data-place=pending] details.attempts li [data-field=consumer]')].map(e => e.textContent).join(',')"
            )
                == "worker-a,worker-b")
        #expect(try await browser.evaluate("document.body.innerHTML.includes('SECRETTOKEN456')") == .bool(false))
        try await browser.open(dashboard.url + "/find?account=alpha-account-1")
        #expect(try await browser.evaluate("document.querySelectorAll('tr[data-place=\"dead letter\"]').length") == .number(2))
        try await browser.open(dashboard.url + "/find?action=act-none")
        #expect(try await browser.evaluate("document.querySelector('[data-field=nothing]') !== null") == .bool(true))
        try await browser.open(dashboard.url + "/")

        // Pause and resume with the buttons.
        try await browser.clickAndWait(#"tr[data-stream="webhooks"] button.pause"#)
        #expect(try await stack.redis.send("HEXISTS", RedisArgument(stack.keys.pausedStreams), "webhooks").int == 1)
        #expect(
            try await browser.evaluate(#"document.querySelector('tr[data-stream="webhooks"] td[data-field=state]').textContent"#).stringValue?
                .hasPrefix("paused since") == true)
        #expect(try await browser.evaluate("document.querySelector('.flash').textContent").stringValue?.contains("paused webhooks") == true)
        try await browser.clickAndWait(#"tr[data-stream="push"] button.resume"#)
        #expect(try await stack.redis.send("HEXISTS", RedisArgument(stack.keys.pausedStreams), "push").int == 0)

        // Dead letters: filtered by account, replayed, deleted.
        try await browser.open(dashboard.url + "/dead-letters?account=alpha-account-1")
        #expect(try await browser.evaluate("document.querySelectorAll('tr[data-letter]').length") == .number(2))
        // The first keeps its two attempts (folded), masked; the other has none to show.
        #expect(
            try await browser.evaluate(#"document.querySelector('tr[data-letter="\#(letters[0])"] details.attempts summary').textContent"#)
                == "2 attempt(s)")
        #expect(try await browser.evaluate(#"document.querySelectorAll('tr[data-letter="\#(letters[2])"] details.attempts').length"#) == .number(0))
        #expect(try await browser.evaluate("document.body.innerHTML.includes('SECRETTOKEN456')") == .bool(false))
        let before = try await stack.redis.length(of: .webhooks, keys: stack.keys)
        try await browser.clickAndWait(#"tr[data-letter="\#(letters[0])"] button.replay"#)
        #expect(
            try await stack.redis.send(
                "XRANGE", RedisArgument(stack.keys.deadLetterStream(Self.shard)), Self.local(letters[0]), Self.local(letters[0])
            )
            .array?.isEmpty == true)
        #expect(try await stack.redis.length(of: .webhooks, keys: stack.keys) == before + 1)
        // Back on the filtered page it came from, which now lists one.
        #expect(try await browser.evaluate("location.search").stringValue?.contains("account=alpha-account-1") == true)
        #expect(try await browser.evaluate("document.querySelectorAll('tr[data-letter]').length") == .number(1))
        try await browser.clickAndWait(#"tr[data-letter="\#(letters[2])"] button.delete"#)
        let left = try await stack.redis.send("XRANGE", RedisArgument(stack.keys.deadLetterStream(Self.shard)), "-", "+").streamEntries.map(\.id)
        #expect(left.map { "\(Self.shard.index):\($0)" } == [letters[1]])
        #expect(try await browser.evaluate("document.querySelector('.flash').textContent").stringValue == "deleted \(letters[2])")

        // Filtered by error text and time window: how many match in all, and one button to replay them.
        try await browser.open(dashboard.url + "/dead-letters?error=REFUSED&since=1h")
        #expect(try await browser.evaluate("document.querySelector('[data-field=matching]').textContent") == "1")
        let queued = try await stack.redis.length(of: .webhooks, keys: stack.keys)
        try await browser.clickAndWait("button.replay-matching")
        #expect(try await browser.evaluate("document.querySelector('.flash').textContent").stringValue == "replayed 1 matching dead letter(s)")
        #expect(try await stack.redis.send("XLEN", RedisArgument(stack.keys.deadLetterStream(Self.shard))).int == 0)
        #expect(try await stack.redis.length(of: .webhooks, keys: stack.keys) == queued + 1)
        let unreadable = try await stack.get(port: Int(dashboard.url.split(separator: ":").last!)!, "/dead-letters?since=yesterday")
        #expect(unreadable.status == .badRequest && unreadable.json["error"]?["message"]?.stringValue?.contains("since yesterday") == true)

        // The failing page: the entry delivered twice.
        try await browser.open(dashboard.url + "/pending?min_deliveries=2")
        #expect(
            try await browser.evaluate("[...document.querySelectorAll('tr[data-entry]')].map(r => r.dataset.entry).join(',')").stringValue?.isEmpty
                == false)
        #expect(try await browser.evaluate("document.querySelector('tr[data-entry] td[data-field=deliveries]').textContent") == "2")
        await browser.close()

        // Forms from elsewhere: no token, a wrong token, another site's browser, another origin.
        let token = try #require(html.firstMatch(of: /name="csrf" value="([0-9a-f]{64})"/)?.1).description
        let port = Int(dashboard.url.split(separator: ":").last!)!
        func post(_ body: String, headers: [(String, String)] = []) async throws -> (HTTPResponseStatus, String) {
            var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)/streams/jobs/pause")
            request.method = .POST
            request.headers.add(name: "content-type", value: "application/x-www-form-urlencoded")
            for (name, value) in headers { request.headers.add(name: name, value: value) }
            request.body = .bytes(ByteBuffer(string: body))
            let response = try await stack.http.execute(request, timeout: .seconds(10))
            return (response.status, String(buffer: try await response.body.collect(upTo: 1 << 16)))
        }
        #expect(try await post("back=/").0 == .badRequest)
        #expect(try await post("csrf=" + String(repeating: "0", count: 64)).0 == .forbidden)
        #expect(try await post("csrf=" + token, headers: [("Sec-Fetch-Site", "cross-site")]).0 == .forbidden)
        #expect(try await post("csrf=" + token, headers: [("Origin", "http://evil.example")]).0 == .forbidden)
        #expect(try await stack.redis.send("HEXISTS", RedisArgument(stack.keys.pausedStreams), "jobs").int == 0)
        // The right token from this dashboard's own page works; a `back` to another host is ignored (the client follows
        // the redirect, to this dashboard's overview: a redirect elsewhere would fail to connect).
        let (status, body) = try await post("csrf=" + token + "&back=//evil.example/")
        #expect(status == .ok && body.contains("<h1>Streams</h1>") && body.contains("paused jobs"), "\(body)")
        #expect(try await stack.redis.send("HEXISTS", RedisArgument(stack.keys.pausedStreams), "jobs").int == 1)
        // Bad input is answered in JSON.
        let bad = try await stack.get(port: port, "/pending?stream=nonsense")
        #expect(bad.status == .badRequest && bad.json["error"]?["message"]?.stringValue?.contains("webhooks, jobs or push") == true)
        await dashboard.process.stop()
        await stack.shutdown()
    }

    /// Behind a real nginx at `/ops/roundup/` (which strips the prefix, as most proxies are set up), in Chromium: the
    /// viewer sees the pages, styled, with no button, and navigates under the sub-path; the operator pauses a stream
    /// from the same pages and lands back under the sub-path; the viewer's own post is refused and logged with who.
    @Test func behindAProxyAtASubPathAViewerSeesAndTheOperatorActs() async throws {
        try #require(HeadlessBrowser.executable != nil, "chromium is not installed: scripts/test installs it")
        let nginx = try #require(
            ["/usr/sbin/nginx", "/usr/bin/nginx"].first { FileManager.default.isExecutableFile(atPath: $0) }, "nginx: scripts/test installs it")
        let stack = try await Stack(store: .sqlite)
        _ = try await populate(stack)
        let password = "dashboard-password-0123456789"
        let viewer = "dashboard-viewer-0123456789"
        let dashboard = try await startDashboard(
            stack,
            extra: ["ROUNDUP_DASHBOARD_TOKEN": password, "ROUNDUP_DASHBOARD_VIEWER_TOKEN": viewer, "ROUNDUP_DASHBOARD_BASE_PATH": "/ops/roundup"])
        let directory = stack.directory.appendingPathComponent("nginx")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let port = try TestSupport.freePort()
        let conf = """
            daemon off; master_process off; pid \(directory.path)/nginx.pid; error_log \(directory.path)/error.log;
            events { worker_connections 64; }
            http {
              access_log off; client_body_temp_path \(directory.path)/body; proxy_temp_path \(directory.path)/proxy;
              fastcgi_temp_path \(directory.path)/fastcgi; uwsgi_temp_path \(directory.path)/uwsgi; scgi_temp_path \(directory.path)/scgi;
              server {
                listen 127.0.0.1:\(port);
                location /ops/roundup/ { proxy_pass \(dashboard.url)/; proxy_set_header Host $http_host; }
              }
            }
            """
        try conf.write(to: directory.appendingPathComponent("nginx.conf"), atomically: true, encoding: .utf8)
        let proxy = try ManagedProcess(
            name: "nginx-\(port)", executable: URL(fileURLWithPath: nginx),
            arguments: ["-c", directory.appendingPathComponent("nginx.conf").path, "-p", directory.path, "-e", directory.path + "/error.log"],
            environment: [:], logDirectory: stack.directory)
        let base = "http://127.0.0.1:\(port)/ops/roundup"
        #expect(await TestSupport.eventually(timeout: .seconds(10)) { (try? await stack.get(port: port, "/ops/roundup/healthz").status) == .ok })
        let browser = try await HeadlessBrowser(directory: stack.directory)
        func basic(_ user: String, _ secret: String) -> String { "Basic " + Data("\(user):\(secret)".utf8).base64EncodedString() }

        try await browser.setExtraHeaders(["Authorization": basic("support", viewer)])
        try await browser.open(base + "/")
        #expect(try await browser.evaluate("document.querySelector('h1').textContent") == "Streams")
        #expect(try await browser.evaluate("document.querySelector('[data-role=viewer]') !== null") == .bool(true))
        #expect(try await browser.evaluate("document.querySelectorAll('form[method=post]').length") == .number(0))
        // The stylesheet came through the proxy, under the sub-path.
        #expect(try await browser.evaluate("getComputedStyle(document.querySelector('header')).display") == "flex")
        let targets = try await browser.evaluate(
            "[...document.querySelectorAll('a[href], form[action], link[href]')].map(e => e.getAttribute('href') || e.getAttribute('action')).join(' ')"
        )
        #expect(targets.stringValue?.split(separator: " ").allSatisfy { $0.hasPrefix("/ops/roundup/") } == true, "\(targets)")
        try await browser.clickAndWait("nav a[href$='/dead-letters']")
        #expect(try await browser.evaluate("location.pathname") == "/ops/roundup/dead-letters")
        #expect(try await browser.evaluate("document.querySelectorAll('tr[data-letter]').length") == .number(3))
        #expect(try await browser.evaluate("document.querySelectorAll('button.replay').length") == .number(0))

        try await browser.setExtraHeaders(["Authorization": basic("ops-alice", password)])
        try await browser.open(base + "/")
        #expect(try await browser.evaluate("document.querySelector('[data-role=viewer]') === null") == .bool(true))
        try await browser.clickAndWait("tr[data-stream=jobs] button.pause")
        #expect(try await browser.evaluate("location.pathname") == "/ops/roundup/")
        #expect(try await browser.evaluate("document.querySelector('.flash').textContent").stringValue?.hasPrefix("paused jobs") == true)
        #expect(try await stack.redis.send("HEXISTS", RedisArgument(stack.keys.pausedStreams), "jobs").int == 1)
        await browser.close()

        // The viewer's post, even with the page's token: refused, nothing changed, and the dashboard logged who.
        var request = HTTPClientRequest(url: base + "/streams/webhooks/pause")
        request.method = .POST
        request.headers.add(name: "authorization", value: basic("support", viewer))
        request.headers.add(name: "content-type", value: "application/x-www-form-urlencoded")
        request.body = .bytes(ByteBuffer(string: "csrf=" + String(repeating: "0", count: 64)))
        let refused = try await stack.http.execute(request, timeout: .seconds(10))
        #expect(refused.status == .forbidden)
        #expect(try await stack.redis.send("HEXISTS", RedisArgument(stack.keys.pausedStreams), "webhooks").int == 0)
        #expect(dashboard.process.output.contains("dashboard action refused to a viewer") && dashboard.process.output.contains("support"))
        #expect(dashboard.process.output.contains("dashboard action") && dashboard.process.output.contains("ops-alice"))
        await proxy.stop()
        await dashboard.process.stop()
        await stack.shutdown()
    }

    @Test func aPasswordIsAskedWhenSetAndRequiredBeyondLoopback() async throws {
        let stack = try await Stack(store: .sqlite)
        let password = "dashboard-password-0123456789"
        let dashboard = try await startDashboard(stack, extra: ["ROUNDUP_DASHBOARD_TOKEN": password])
        let port = Int(dashboard.url.split(separator: ":").last!)!
        func get(_ authorization: String?) async throws -> HTTPClientResponse {
            var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)/")
            if let authorization { request.headers.add(name: "authorization", value: authorization) }
            return try await stack.http.execute(request, timeout: .seconds(10))
        }
        let none = try await get(nil)
        #expect(none.status == .unauthorized && none.headers.first(name: "www-authenticate")?.hasPrefix("Basic") == true)
        #expect(try await get("Basic " + Data("ops:wrong-password-000000".utf8).base64EncodedString()).status == .unauthorized)
        let good = try await get("Basic " + Data("ops:\(password)".utf8).base64EncodedString())
        #expect(good.status == .ok)
        #expect(good.headers.first(name: "content-security-policy")?.contains("default-src 'none'") == true)
        #expect(good.headers.first(name: "x-frame-options") == "DENY")
        await dashboard.process.stop()

        // Beyond loopback without a password: refused at start, saying why.
        let open = try ManagedProcess(
            name: "dashboard-open", executable: TestSupport.binDirectory.appendingPathComponent("roundupctl"),
            arguments: ["dashboard", "--host", "0.0.0.0", "--port", String(try TestSupport.freePort())], environment: stack.environment,
            logDirectory: stack.directory)
        let code = await open.wait(timeout: .seconds(20))
        #expect(code != nil && code != 0)
        #expect(open.output.contains("ROUNDUP_DASHBOARD_TOKEN"), "\(open.output)")
        await stack.shutdown()
    }
}
