import Foundation
import NIOHTTP1
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStore
import RoundupStreams
import RoundupTesting
import Testing

/// Metrics that move, readiness, JSON logs without secrets, and SIGTERM under load.
@Suite(.serialized) struct OperationsTests {
    static func value(_ metrics: String, _ series: String) -> Double? {
        for line in metrics.split(separator: "\n") where line.hasPrefix(series + " ") {
            return Double(line.dropFirst(series.count + 1).trimmingCharacters(in: .whitespaces))
        }
        return nil
    }

    @Test func metricsMoveWhenWorkHappens() async throws {
        let stack = try await Stack()
        let e2e = EndToEndTests()
        let (store, account) = try await e2e.seed(stack)
        stack.trello.setCard(FakeTrello.card(id: "M1", listID: "L1", boardID: "B1", name: "Metered"))
        try await stack.startWorker(name: "w1", extra: ["ROUNDUP_CLAIM_IDLE_MS": "400"])
        try await stack.startIngress()
        let port = try #require(stack.workerPorts["w1"])
        #expect(try await stack.get("/readyz").status == .ok)
        #expect(try await stack.get(port: port, "/readyz").status == .ok)

        let body = WebhookBodies.body(type: "createCard", actionID: "M-1", cardID: "M1", listID: "L1", boardID: "B1")
        let path = try await stack.webhookPath(account: account)
        #expect(try await stack.postWebhook(path: path, body: body, secret: EndToEndTests.secret).status == .ok)
        #expect(try await stack.postWebhook(path: path, body: body, secret: EndToEndTests.secret).status == .ok)
        #expect(try await stack.postWebhook(path: path, body: body, secret: "wrong").status == .unauthorized)
        #expect(try await TestSupport.eventually { try await store.pendingChanges(accountID: account, afterID: 0, limit: 10).count == 1 })

        let ingress = try await stack.get("/metrics").body
        #expect(Self.value(ingress, #"roundup_webhooks_received_total{result="accepted"}"#) == 1)
        #expect(Self.value(ingress, #"roundup_webhooks_received_total{result="duplicate"}"#) == 1)
        #expect(Self.value(ingress, #"roundup_webhooks_received_total{result="bad_signature"}"#) == 1)
        #expect(Self.value(ingress, #"roundup_ingress_requests_total{status="401"}"#) == 1)
        #expect(ingress.contains("roundup_ingress_enqueue_duration_seconds_bucket"))

        let seen = try await TestSupport.eventually {
            let worker = try await stack.get(port: port, "/metrics").body
            return Self.value(worker, #"roundup_worker_events_total{result="processed"}"#) == 1
        }
        #expect(seen)
        let worker = try await stack.get(port: port, "/metrics").body
        #expect(Self.value(worker, #"roundup_worker_changes_written_total"#) == 1)
        #expect(Self.value(worker, #"roundup_trello_requests_total{status="2xx"}"#) ?? 0 >= 1)
        #expect(Self.value(worker, #"roundup_worker_events_by_type_total{type="createCard",result="done"}"#) == 1)
        #expect(
            worker.contains("roundup_stream_length") && worker.contains("roundup_stream_lag")
                && worker.contains("roundup_stream_oldest_pending_age_seconds"))

        // The API's request metrics, by route and status.
        try await stack.startAPI(bootstrapToken: nil)
        _ = try await stack.callAPI(.GET, "/dailyroundup/changes", token: "rt_nobody")
        let api = try await stack.callAPI(.GET, "/metrics", token: nil).body
        #expect(api.contains("hb_requests") && api.contains(#"http_route="/dailyroundup/changes""#))
        await stack.shutdown()
    }

    @Test func jsonLogsHoldNoSecrets() async throws {
        let stack = try await Stack()
        let env = ["LOG_FORMAT": "json", "LOG_LEVEL": "debug"]
        try await stack.startIngress(extra: env)
        try await stack.startWorker(name: "w1", extra: env)
        try await stack.startAPI(bootstrapToken: APITests.bootstrap, extra: env)
        let created = try await stack.callAPI(.POST, "/dailyroundup/account", token: APITests.bootstrap)
        let account = try #require(created.json["account_id"]?.stringValue)
        let token = try #require(created.json["auth_token"]?.stringValue)
        let secret = "json-log-webhook-secret-42"
        _ = try await stack.callAPI(
            .PUT, "/dailyroundup/account", token: token,
            body: #"{"trello_api_key":"test-api-key","trello_token":"test-token","trello_webhook_secret":"\#(secret)"}"#)
        stack.trello.addList(id: "L1", boardID: "B1")
        #expect(
            try await stack.callAPI(.POST, "/dailyroundup/lists", token: token, body: #"{"name":"L","trello_board_id":"B1","trello_list_id":"L1"}"#)
                .status == .created)
        stack.trello.setCard(FakeTrello.card(id: "J1", listID: "L1", boardID: "B1", name: "Logged"))
        let body = WebhookBodies.body(type: "createCard", actionID: "J-1", cardID: "J1", listID: "L1", boardID: "B1")
        #expect(try await stack.postWebhook(path: try await stack.webhookPath(account: account), body: body, secret: secret).status == .ok)
        #expect(
            try await TestSupport.eventually {
                try await stack.callAPI(.GET, "/dailyroundup/changes", token: token).json["changes"]?.arrayValue?.count == 1
            })
        _ = try await stack.callAPI(.GET, "/dailyroundup/changes", token: "rt_wrong_token_value")
        await stack.shutdown()

        let logs = stack.allLogs
        let lines = logs.split(separator: "\n").filter { !$0.isEmpty }
        #expect(lines.count > 10)
        for line in lines {
            let object = try? JSONParser.parse(Array(line.utf8))
            #expect(object?["msg"] != nil && object?["level"] != nil, "not a JSON log line: \(line.prefix(200))")
        }
        // Hummingbird's request lines carry a request id.
        #expect(logs.contains("hb.request.id"))
        for value in [secret, token, APITests.bootstrap, "test-token", "test-api-key", "rt_wrong_token_value"] {
            #expect(!logs.contains(value), "a log line contains \(value)")
        }
    }

    @Test func redactionCutsSecretsFromMetadataAndText() {
        #expect(RoundupLogHandler.isSecretKey("trello_token") && RoundupLogHandler.isSecretKey("Authorization"))
        #expect(!RoundupLogHandler.isSecretKey("account"))
        #expect(RoundupLogHandler.redact("header Bearer abc.DEF-123 done") == "header [redacted] done")
        #expect(RoundupLogHandler.redact(#"OAuth oauth_consumer_key="k1", oauth_token="t1""#) == "OAuth [redacted], [redacted]")
    }

    @Test func sigtermUnderLoadLosesNothing() async throws {
        let stack = try await Stack()
        let e2e = EndToEndTests()
        let (store, account) = try await e2e.seed(stack)
        let total = 150
        for i in 0..<total { stack.trello.setCard(FakeTrello.card(id: "T\(i)", listID: "L1", boardID: "B1", name: "Task \(i)")) }
        stack.trello.setCardDelay(.milliseconds(10))
        try await stack.startIngress()
        let first = try await stack.startWorker(name: "first", extra: ["ROUNDUP_WORKER_BATCH": "20"])
        var accepted = 0
        let path = try await stack.webhookPath(account: account)
        for i in 0..<total {
            let body = WebhookBodies.body(type: "createCard", actionID: "T-\(i)", cardID: "T\(i)", listID: "L1", boardID: "B1")
            if try await stack.postWebhook(path: path, body: body, secret: EndToEndTests.secret).status == .ok { accepted += 1 }
            if i == total / 2 { first.signal(SIGTERM) }  // mid-load: it finishes its batch, acks, exits
        }
        #expect(accepted == total)
        #expect(await first.wait(timeout: .seconds(30)) == 0)
        try await stack.startWorker(name: "second")
        let all = try await TestSupport.eventually(timeout: .seconds(60)) {
            try await store.pendingChanges(accountID: account, afterID: 0, limit: 1000).count == total
        }
        #expect(all)
        #expect(Set(try await store.pendingChanges(accountID: account, afterID: 0, limit: 1000).map(\.trelloCardID)).count == total)
        // Nothing was left pending by the worker that stopped.
        #expect(try await stack.redis.pendingCount(of: .webhooks, keys: stack.keys) == 0)
        await stack.shutdown()
    }
}
