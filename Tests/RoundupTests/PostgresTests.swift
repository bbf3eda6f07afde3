import Foundation
import Logging
import NIOHTTP1
import PostgresNIO
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStreams
import RoundupTesting
import Testing

@testable import RoundupPostgres
@testable import RoundupStore

/// Scale-out on PostgreSQL: several API and worker processes against one database and one Redis, and a database
/// restart under load. These run when PostgreSQL is available (`ROUNDUP_TEST_POSTGRES_URL`, which scripts/test sets).
@Suite(.serialized, .enabled(if: StoreBackend.available.contains(.postgres))) struct PostgresTests {
    static let bootstrap = "bootstrap-0123456789abcdef"
    static let secret = EndToEndTests.secret

    /// An account made through the API, with list L1 on board B1 written straight to the store (no Trello set-up).
    func account(_ stack: Stack) async throws -> (account: String, token: String) {
        let created = try await stack.callAPI(.POST, "/dailyroundup/account", token: Self.bootstrap)
        #expect(created.status == .created)
        let account = try #require(created.json["account_id"]?.stringValue)
        let token = try #require(created.json["auth_token"]?.stringValue)
        let store = try await stack.store()
        try await store.updateAccountCredentials(id: account, apiKey: "test-api-key", token: "test-token", webhookSecret: Self.secret)
        _ = try await store.createSyncList(accountID: account, name: "Burst", trelloBoardID: "B1", trelloListID: "L1")
        return (account, token)
    }

    /// Webhooks posted `width` at a time, with `pause` between groups.
    func post(_ stack: Stack, account: String, bodies: [[UInt8]], width: Int = 8, pause: Duration = .zero) async throws -> [Int] {
        var statuses: [Int] = []
        let path = try await stack.webhookPath(account: account)
        for start in stride(from: 0, to: bodies.count, by: width) {
            if pause > .zero { try await Task.sleep(for: pause) }
            try await withThrowingTaskGroup(of: Int.self) { group in
                for body in bodies[start..<min(start + width, bodies.count)] {
                    group.addTask {
                        Int(try await stack.postWebhook(path: path, body: body, secret: Self.secret).status.code)
                    }
                }
                for try await status in group { statuses.append(status) }
            }
        }
        return statuses
    }

    /// What an app does: pages through its changes with `after_id`, acks each page, alternating between API processes.
    /// Returns every change it received, in order.
    final class App: @unchecked Sendable {
        // @unchecked: used from the one test task.
        var received: [JSONValue] = []
        var afterID: Int64 = 0
        var turn = 0

        func pull(_ stack: Stack, token: String) async throws {
            while true {
                let port = stack.apis[turn % stack.apis.count].port
                turn += 1
                let page = try await stack.callAPI(.GET, "/dailyroundup/changes?after_id=\(afterID)&limit=50", token: token, port: port)
                #expect(page.status == .ok)
                let changes = page.json["changes"]?.arrayValue ?? []
                guard !changes.isEmpty else { return }
                received += changes
                let ids = changes.compactMap { $0["id"]?.numberValue.map { Int64($0) } }
                afterID = ids.max() ?? afterID
                let acks = ids.map { #"{"id":\#($0),"reminder_id":"r-\#($0)"}"# }.joined(separator: ",")
                let ack = try await stack.callAPI(
                    .POST, "/dailyroundup/changes/ack", token: token, body: #"{"acks":[\#(acks)]}"#, port: stack.apis[turn % stack.apis.count].port)
                #expect(ack.status == .ok, "\(ack.body)")
                if page.json["has_more"] != .bool(true) { return }
            }
        }
    }

    /// A row read past its last column is a damaged row (an error: the entry that met it is isolated), never
    /// PostgresNIO's out-of-range trap, which would end the process.
    @Test func aRowReadPastItsLastColumnIsAnErrorNotATrap() async throws {
        let url = try await TestStore.makeURL(.postgres, in: try TestSupport.temporaryDirectory("pg-width"))
        let store = try #require(try await TestStore.open(url: url) as? PostgresStore)
        let rows = try await store.client.withConnection { try await $0.rows("SELECT 'a', 1::bigint", store.logger) }
        let row = try #require(rows.first)
        #expect(try row.text(0) == "a")
        #expect(try row.int64(1) == 1)
        #expect(throws: UnknownStoredValue.self) { try row.text(2) }
        #expect(throws: UnknownStoredValue.self) { try row.optionalText(-1) }
    }

    @Test func twoAPIsAndTwoWorkersApplyABurstExactlyOnce() async throws {
        let stack = try await Stack(store: .postgres)
        try await stack.startAPI(bootstrapToken: Self.bootstrap)
        try await stack.startAPI(bootstrapToken: Self.bootstrap)
        let (account, token) = try await account(stack)
        let count = 300
        for i in 0..<count { stack.trello.setCard(FakeTrello.card(id: "P\(i)", listID: "L1", boardID: "B1", name: "Task \(i)")) }
        // No scheduled reconciliation: this is about the webhook path alone.
        let options = ["ROUNDUP_WORKER_BATCH": "25", "ROUNDUP_RECONCILE_INTERVAL_SECONDS": "0"]
        try await stack.startWorker(name: "w1", extra: options)
        try await stack.startWorker(name: "w2", extra: options)
        try await stack.startIngress()

        // The burst: every card created, a third of them delivered twice (Trello retries), while the app pulls
        // through both APIs; then every card renamed, and the app pulls again.
        let creates = (0..<count).map { i in
            WebhookBodies.body(type: "createCard", actionID: "create-\(i)", cardID: "P\(i)", listID: "L1", boardID: "B1")
        }
        let app = App()
        async let pulled: Void = {
            for _ in 0..<20 {
                try await app.pull(stack, token: token)
                try await Task.sleep(for: .milliseconds(50))
            }
        }()
        let statuses = try await post(stack, account: account, bodies: creates + creates.enumerated().filter { $0.offset % 3 == 0 }.map(\.element))
        try await pulled
        #expect(statuses.allSatisfy { $0 == 200 })
        for i in 0..<count { stack.trello.setCard(FakeTrello.card(id: "P\(i)", listID: "L1", boardID: "B1", name: "Renamed \(i)")) }
        let renames = (0..<count).map { i in
            WebhookBodies.body(
                type: "updateCard", actionID: "rename-\(i)", cardID: "P\(i)", listID: "L1", boardID: "B1", card: ["name": .string("Renamed \(i)")],
                old: ["name": .string("Task \(i)")], date: "2026-11-22T10:05:00.000Z")
        }
        #expect(try await post(stack, account: account, bodies: renames).allSatisfy { $0 == 200 })
        #expect(try await TestSupport.eventually(timeout: .seconds(60)) { try await stack.streamLength() == 0 })
        try await app.pull(stack, token: token)

        // Exactly once: one create per card, no card missing, and each card's last value is its new name.
        var creates_ = [String: Int](), lastTitle = [String: String]()
        for change in app.received {
            guard let card = change["trello_card_id"]?.stringValue else { continue }
            if change["change_type"] == .string("create") { creates_[card, default: 0] += 1 }
            if let title = change["fields"]?["title"]?.stringValue { lastTitle[card] = title }
        }
        #expect(creates_.count == count)
        #expect(creates_.values.allSatisfy { $0 == 1 })
        #expect((0..<count).allSatisfy { lastTitle["P\($0)"] == "Renamed \($0)" })
        // Ids handed out in order: the app never saw an id below one it had already read past.
        let ids = app.received.compactMap { $0["id"]?.numberValue }
        #expect(ids == ids.sorted())
        // Each accepted event processed by exactly one worker, once.
        var processed = 0.0
        for (_, port) in stack.workerPorts {
            let metrics = try await stack.get(port: port, "/metrics").body
            processed += OperationsTests.value(metrics, #"roundup_worker_events_total{result="processed"}"#) ?? 0
        }
        #expect(processed == Double(2 * count))
        #expect(try await stack.redis.deadLetterCount(of: .webhooks, keys: stack.keys) == 0)
        await stack.shutdown()
    }

    /// A new PostgreSQL store with a pool of two and a deadline of `seconds`, its URL, and a logger that stays quiet.
    static func storeWithDeadline(_ name: String, seconds: Int) async throws -> (store: any ServerStore, url: String, logger: Logger) {
        let url = try await TestStore.makeURL(.postgres, in: try TestSupport.temporaryDirectory(name))
        var environment = ProcessInfo.processInfo.environment
        environment["ROUNDUP_DATABASE_URL"] = url
        environment["ROUNDUP_DATABASE_POOL_SIZE"] = "2"
        environment["ROUNDUP_DATABASE_TIMEOUT_SECONDS"] = String(seconds)
        var quiet = Logger(label: "roundup.test.\(name)")
        quiet.logLevel = .critical
        return (try await TestStore.open(configuration: try RoundupConfiguration(environment: environment), logger: quiet), url, quiet)
    }

    /// PostgresNIO's queries ignore task cancellation, so a deadline that only cancels waits for them: a query blocked
    /// on a lock someone else holds stands for a query on a connection that will never answer. The store gives up at its
    /// deadline (1 s here) by closing that connection, and the next call gets a fresh one.
    @Test func aQueryThatIgnoresCancellationEndsAtTheStoreDeadline() async throws {
        let (store, url, quiet) = try await Self.storeWithDeadline("deadline", seconds: 1)
        let account = try await store.createAccount(authTokenHash: "deadline-test")

        // Another session locks the accounts table, so the store's next read of it waits in the server.
        let target = try PostgresURL(url)
        let holder = try await PostgresConnection.connect(
            configuration: .init(
                host: target.host, port: target.port, username: target.username, password: target.password, database: target.database, tls: .disable),
            id: 99, logger: quiet)
        _ = try await holder.query("BEGIN", logger: quiet)
        _ = try await holder.query("LOCK TABLE accounts IN ACCESS EXCLUSIVE MODE", logger: quiet)
        // Released after 10 s whatever happens, so a store that waits for its query ends the test instead of hanging it.
        let release = Task {
            try? await Task.sleep(for: .seconds(10))
            _ = try? await holder.query("ROLLBACK", logger: quiet)
        }

        let clock = ContinuousClock()
        let start = clock.now
        await #expect(throws: (any Error).self) { _ = try await store.account(id: account) }
        let waited = clock.now - start
        #expect(waited < .seconds(4), "the read took \(waited): the deadline waited for a query that ignores cancellation")

        release.cancel()
        _ = try? await holder.query("ROLLBACK", logger: quiet)
        try? await holder.close()
        // The closed connection was replaced: the store answers again.
        #expect(try await store.account(id: account) != nil)
    }

    /// A query written to a connection that has just closed never completes in PostgresNIO 1.33 (it is written without
    /// a promise), and a ROLLBACK after a lost connection is such a query: when PostgreSQL restarted under load, a
    /// worker's batch waited for it forever. The store answers at its deadline whatever the operation does, and a
    /// transaction whose connection is lost fails without waiting for a rollback.
    @Test(.timeLimit(.minutes(1))) func aTransactionWhoseConnectionClosesAnswersByTheDeadline() async throws {
        let (opened, _, logger) = try await Self.storeWithDeadline("closed", seconds: 2)
        let store = try #require(opened as? PostgresStore)
        let account = try await store.createAccount(authTokenHash: "closed-test")
        let clock = ContinuousClock()

        // The connection closes under the transaction; its next statement (and no rollback) ends the call.
        var start = clock.now
        await #expect(throws: (any Error).self) {
            try await store.write { c in
                try await c.close()
                _ = try await c.query("SELECT 1", logger: logger)
            }
        }
        #expect(clock.now - start < .seconds(4), "a transaction on a closed connection took \(clock.now - start)")

        // An operation that never ends at all is answered at the deadline.
        start = clock.now
        await #expect(throws: (any Error).self) {
            try await store.read { _ in
                await withUnsafeContinuation { (_: UnsafeContinuation<Void, Never>) in }
            }
        }
        #expect(clock.now - start < .seconds(4), "an operation that never ends took \(clock.now - start)")
        // The pool replaced what was lost: the store answers again.
        #expect(try await store.account(id: account) != nil)
    }

    @Test func aPostgresRestartUnderLoadLosesNothing() async throws {
        let stack = try await Stack(store: .postgres)
        try await stack.startAPI(bootstrapToken: Self.bootstrap)
        let (account, token) = try await account(stack)
        let count = 240
        for i in 0..<count { stack.trello.setCard(FakeTrello.card(id: "R\(i)", listID: "L1", boardID: "B1", name: "Task \(i)")) }
        // Short claim and few deliveries: without the store-outage rule these events would be dead-lettered.
        let options = [
            "ROUNDUP_WORKER_BATCH": "10", "ROUNDUP_CLAIM_IDLE_MS": "500", "ROUNDUP_MAX_DELIVERIES": "3", "ROUNDUP_RECONCILE_INTERVAL_SECONDS": "0",
            // A query stuck on a connection the restart broke is given up after 5 s and its batch retried.
            "ROUNDUP_DATABASE_TIMEOUT_SECONDS": "5",
        ]
        try await stack.startWorker(name: "w1", extra: options)
        try await stack.startIngress()
        let creates = (0..<count).map { i in
            WebhookBodies.body(type: "createCard", actionID: "restart-\(i)", cardID: "R\(i)", listID: "L1", boardID: "B1")
        }
        // A steady load of about six seconds; PostgreSQL stops a quarter of the way in and is down for three seconds.
        async let load = post(stack, account: account, bodies: creates, width: 2, pause: .milliseconds(50))
        try await Task.sleep(for: .milliseconds(1500))
        try await TestStore.postgresControl("stop")
        try await Task.sleep(for: .seconds(3))
        try await TestStore.postgresControl("start")
        let statuses = try await load
        // The ingress never touches the database: every webhook got its 200 while the store was down.
        #expect(statuses.allSatisfy { $0 == 200 })

        let app = App()
        let all = try await TestSupport.eventually(timeout: .seconds(60)) {
            try await stack.streamLength() == 0
        }
        // A query stuck on a broken connection ends at the store deadline (its connection closed), so the store cannot
        // stall the worker (see `aQueryThatIgnoresCancellationEndsAtTheStoreDeadline`), nor does a rollback on a
        // connection the restart closed (see `aTransactionWhoseConnectionClosesAnswersByTheDeadline`).
        try await app.pull(stack, token: token)
        let cards = app.received.compactMap { $0["trello_card_id"]?.stringValue }
        #expect(all)
        #expect(cards.count == count)
        #expect(Set(cards).count == cards.count)
        #expect(try await stack.redis.deadLetterCount(of: .webhooks, keys: stack.keys) == 0)
        // (Whether the worker saw errors depends on timing: a transaction in flight at the stop fails and is retried;
        // a request made while the server is down waits in PostgresNIO's pool until it is back. Either way, nothing is lost.)
        await stack.shutdown()
    }
}
