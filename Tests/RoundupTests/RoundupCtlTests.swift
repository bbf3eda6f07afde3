import Foundation
import GRDB
import NIOHTTP1
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStore
import RoundupStreams
import RoundupTesting
import Testing

/// The real `roundupctl` binary against a real redis-server.
@Suite(.serialized) struct RoundupCtlTests {
    func run(_ stack: Stack, _ arguments: [String], extra: [String: String] = [:]) async throws -> (code: Int32?, output: String) {
        var env = stack.environment
        for (k, v) in extra { env[k] = v }
        let process = try ManagedProcess(
            name: "ctl-\(UUID().uuidString.prefix(6))", executable: TestSupport.binDirectory.appendingPathComponent("roundupctl"),
            arguments: arguments, environment: env, logDirectory: stack.directory)
        let code = await process.wait(timeout: .seconds(30))
        return (code, process.output)
    }

    @Test(arguments: StoreBackend.available) func queuesReportsTheBacklogNumberByNumber(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        let stream = RedisArgument(stack.keys.webhookStream(WebhookShard(index: 0)))
        _ = try await stack.redis.send("XGROUP", "CREATE", stream, "workers", "0", "MKSTREAM")
        for i in 0..<5 { _ = try await stack.redis.send("XADD", stream, "*", "n", RedisArgument(i)) }
        _ = try await stack.redis.send("XREADGROUP", "GROUP", "workers", "c1", "COUNT", 2, "STREAMS", stream, ">")
        for i in 0..<3 {
            _ = try await stack.redis.send(
                "XADD", RedisArgument(stack.keys.deadLetterStream(WebhookShard(index: 0))), "*", "error", RedisArgument("e\(i)"))
        }
        try await Task.sleep(for: .milliseconds(20))

        let (code, output) = try await run(stack, ["queues", "--json"])
        #expect(code == 0, "\(output)")
        let report = try #require(try JSONParser.parse(Array(output.utf8))["streams"]?.arrayValue?.first)
        #expect(report["name"] == "webhooks" && report["paused"] == .bool(false))
        // Three were never delivered; the oldest of them was added just now.
        if case .number(let waiting)? = report["oldest_waiting_age_ms"] {
            #expect(waiting >= 0 && waiting < 60_000)
        } else {
            Issue.record("no oldest_waiting_age_ms")
        }
        #expect(report["length"] == .number(5))
        #expect(report["lag"] == .number(3))
        #expect(report["pending"] == .number(2))
        #expect(report["dead_letters"] == .number(3))
        #expect(report["consumers"]?.arrayValue?.count == 1)
        #expect(report["consumers"]?.arrayValue?.first?["name"] == "c1")
        #expect(report["consumers"]?.arrayValue?.first?["pending"] == .number(2))
        if case .number(let age)? = report["oldest_pending_age_ms"] {
            #expect(age >= 0 && age < 60_000)
        } else {
            Issue.record("no oldest_pending_age_ms")
        }
        let table = try await run(stack, ["queues"])
        #expect(table.code == 0 && table.output.contains("pending       2"))
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func deadLettersAreListedReplayedAndProcessed(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        let (store, account) = try await DeadLetterTests.deadLetterOne(stack, card: "Q1", action: "Q-1", status: 500)

        let listed = try await run(stack, ["dlq", "list", "--json"])
        #expect(listed.code == 0)
        let page = try JSONParser.parse(Array(listed.output.utf8))
        #expect(page["next"] == .null)
        let letter = try #require(page["dead_letters"]?.arrayValue?.first)
        #expect(letter["action"] == "Q-1" && letter["type"] == "createCard")
        #expect(letter["error"]?.stringValue?.contains("500") == true)
        let shown = try await run(stack, ["dlq", "show", try #require(letter["id"]?.stringValue)])
        #expect(shown.code == 0 && shown.output.contains("\"body\":{"))

        // Trello is back: replay, and the event is processed this time.
        stack.trello.failNextCardRequests(status: 500, count: 0)
        let replay = try await run(stack, ["dlq", "replay", "--yes"])
        #expect(replay.code == 0 && replay.output.contains("replayed 1"), "\(replay.output)")
        #expect(try await stack.redis.deadLetterCount(of: .webhooks, keys: stack.keys) == 0)
        #expect(try await TestSupport.eventually { try await store.pendingChanges(accountID: account, afterID: 0, limit: 10).count == 1 })

        // Usage errors exit 2; purge refuses without --yes.
        #expect(try await run(stack, ["dlq", "purge"]).code == 2)
        #expect(try await run(stack, ["no-such-command"]).code == 2)
        #expect(try await run(stack, ["dlq", "purge", "--yes"]).code == 0)
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func checkAndAccountsAndRoutes(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        let (_, account) = try await EndToEndTests().seed(stack)
        let good = try await run(stack, ["check"])
        #expect(good.code == 1, "\(good.output)")  // the seeded key is not 32 hex characters: a real finding
        #expect(good.output.contains("trello_api_key is not 32 hex"))
        if stack.redisCluster {
            // On a cluster (scripts/test's second pass): its slots, every primary's state and replica, the shards' spread.
            #expect(good.output.contains("redis cluster: 16384 of 16384 slots served"), "\(good.output)")
            #expect(good.output.contains("webhook shards, 1 replica(s)") && !good.output.contains("has no healthy replica"), "\(good.output)")
        }
        // APNs credentials are checked when any is set: a key file that is not a .p8, a short key id, a missing topic.
        let badKey = stack.directory.appendingPathComponent("not-a-key.p8")
        try "-----BEGIN PRIVATE KEY-----\nnot base64\n-----END PRIVATE KEY-----\n".write(to: badKey, atomically: true, encoding: .utf8)
        let apns = try await run(
            stack, ["check"],
            extra: [
                "ROUNDUP_APNS_KEY_FILE": badKey.path, "ROUNDUP_APNS_KEY_ID": "SHORT", "ROUNDUP_APNS_TEAM_ID": "ABCDE12345",
            ])
        #expect(apns.code == 1)
        #expect(apns.output.contains("ROUNDUP_APNS_KEY_FILE") && apns.output.contains("not a P-256 .p8 key"), "\(apns.output)")
        #expect(apns.output.contains("ROUNDUP_APNS_KEY_ID should be") && apns.output.contains("ROUNDUP_APNS_TOPIC is not set"))
        let noRedis = try await run(stack, ["check"], extra: ["ROUNDUP_REDIS_URL": "redis://127.0.0.1:1/0"])
        #expect(noRedis.code == 1 && noRedis.output.contains("FAIL  redis"))
        let accounts = try await run(stack, ["accounts", "list", "--json"])
        #expect(accounts.code == 0 && accounts.output.contains(account))
        #expect(!accounts.output.contains(EndToEndTests.secret) && !accounts.output.contains("test-api-key"))
        // routes sync heals a flushed Redis.
        #expect(try await stack.redis.send("HGET", RedisArgument(stack.keys.webhookSecrets), RedisArgument(account)).isNull)
        let sync = try await run(stack, ["routes", "sync"])
        #expect(sync.code == 0)
        #expect(try await stack.redis.send("HGET", RedisArgument(stack.keys.webhookSecrets), RedisArgument(account)).string == EndToEndTests.secret)
        await stack.shutdown()
    }

    /// Writes rows with a GRDB connection (a five-minute-old heartbeat cannot be made through the store): SQLite only.
    @Test(arguments: [StoreBackend.sqlite]) func jobsShowProgressAndStaleness(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        let (store, account) = try await EndToEndTests().seed(stack)
        let fresh = Timestamp.now()
        let old = Timestamp.string(Date().addingTimeInterval(-300))
        _ = store
        // Rows as the job runner writes them, with one heartbeat fresh and one five minutes old.
        let db = try DatabaseQueue(path: stack.databasePath)
        try await db.write { db in
            for (id, processed, total, updated) in [("job-live", 3, 10, fresh), ("job-dead", 1, 5, old)] {
                try db.execute(
                    sql:
                        "INSERT INTO background_jobs (id, account_id, kind, status, processed, total, created_at, updated_at) VALUES (?, ?, 'sync', 'running', ?, ?, ?, ?)",
                    arguments: [id, account, processed, total, updated, updated])
            }
        }
        let listed = try await run(stack, ["jobs", "list", "--json"])
        #expect(listed.code == 0, "\(listed.output)")
        let jobs = try JSONParser.parse(Array(listed.output.utf8)).arrayValue ?? []
        let byID = Dictionary(uniqueKeysWithValues: jobs.compactMap { job in job["job_id"]?.stringValue.map { ($0, job) } })
        #expect(byID["job-live"]?["stale"] == .bool(false) && byID["job-live"]?["processed"] == .number(3))
        #expect(byID["job-dead"]?["stale"] == .bool(true))
        let shown = try await run(stack, ["jobs", "show", "job-dead", "--json"])
        #expect(shown.code == 0 && shown.output.contains(#""stale":true"#))
        #expect(try await run(stack, ["jobs", "show", "nope"]).code == 2)
        await stack.shutdown()
    }
}
