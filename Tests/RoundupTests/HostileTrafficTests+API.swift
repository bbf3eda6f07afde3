import AsyncHTTPClient
import Foundation
import GRDB
import HTTPTypes
import Logging
import NIOCore
import NIOHTTP1
import PostgresNIO
import RoundupCore
import RoundupJobs
import RoundupRedis
import RoundupRuntime
import RoundupStore
import RoundupStreams
import RoundupTesting
import Testing

@testable import RoundupAPI

/// roundup-api against the unauthenticated and the unlucky: guessed tokens from one address, deletions whose Trello
/// token was revoked, resolutions racing a list deletion.
extension HostileTrafficTests {
    static let apiBootstrap = "bootstrap-hostile-0123456789"
    static let apiSecret = "whsec-hostile-0123456789"

    /// A Trello-shaped id (24 hex digits) ending in `n`.
    static func trelloID(_ prefix: String, _ n: Int) -> String {
        let tail = prefix + String(n)
        return String(repeating: "0", count: 24 - tail.count) + tail
    }

    struct Owner {
        var account: String
        var token: String
        /// Sync list id → (Trello list, Trello board).
        var lists: [(id: String, list: String, board: String)]
    }

    /// An account made as the apps make one, with credentials and `count` lists paired (each on its own board), so each
    /// list has a list and a board webhook at Trello.
    func pairedAccount(_ stack: Stack, lists count: Int) async throws -> Owner {
        let created = try await stack.callAPI(.POST, "/dailyroundup/account", token: Self.apiBootstrap)
        #expect(created.status == .created, "\(created.body)")
        let account = try #require(created.json["account_id"]?.stringValue)
        let token = try #require(created.json["auth_token"]?.stringValue)
        let body = #"{"trello_api_key":"test-api-key","trello_token":"test-token","trello_webhook_secret":"\#(Self.apiSecret)"}"#
        #expect(try await stack.callAPI(.PUT, "/dailyroundup/account", token: token, body: body).status == .ok)
        var lists: [(id: String, list: String, board: String)] = []
        for i in 1...count {
            let list = Self.trelloID("a1", i), board = Self.trelloID("b0", i)
            stack.trello.addList(id: list, boardID: board)
            let paired = try await stack.callAPI(
                .POST, "/dailyroundup/lists", token: token, body: #"{"name":"List \#(i)","trello_board_id":"\#(board)","trello_list_id":"\#(list)"}"#)
            #expect(paired.status == .created, "\(paired.body)")
            lists.append((try #require(paired.json["sync_list_id"]?.stringValue), list, board))
        }
        #expect(stack.trello.webhooks.count == 2 * count)
        return Owner(account: account, token: token, lists: lists)
    }

    /// Rows of every kind in one sync list: a task with a pending change, a conflict, a duplicate.
    func seedRows(_ stack: Stack, account: String, syncList: String, n: Int) async throws {
        try await seedRows(try await stack.store(), account: account, syncList: syncList, n: n)
    }

    func seedRows(_ store: any ServerStore, account: String, syncList: String, n: Int) async throws {
        _ = try await store.apply([
            CardObservation(
                accountID: account, syncListID: syncList, cardID: Self.trelloID("c1", n), actionID: "seed-\(n)", actionDate: Date(),
                kind: .fields(["title": .string("seeded \(n)")], full: true))
        ])
        var write = SyncWrite(accountID: account, syncListID: syncList, cardID: Self.trelloID("c2", n), reminderID: "reminder-conflict-\(n)")
        write.conflicts = [NewConflict(field: "title", trelloValue: "from Trello", remindersValue: "from the app")]
        #expect(try await store.recordSyncWrite(write).count == 1)
        _ = try await store.addDuplicate(
            accountID: account,
            NewDuplicate(
                syncListID: syncList, reminderID: "reminder-duplicate-\(n)", cardID: Self.trelloID("c1", n), title: "seeded \(n)", dueDate: nil,
                fields: ["title": .string("seeded \(n)")], jobID: nil))
    }

    /// Every row of the stack's store whose `column` holds `value`, as table → count (tables without rows left out).
    /// Text columns of that name only (the accounts' and lists' ids are text; other tables' `id` are numbers).
    static func rows(_ stack: Stack, column: String, value: String) async throws -> [String: Int] {
        var found: [String: Int] = [:]
        if stack.backend == .postgres {
            let url = try PostgresURL(stack.databaseURL)
            let logger = Logger(label: "roundup.test.rows")
            let connection = try await PostgresConnection.connect(
                configuration: .init(
                    host: url.host, port: url.port, username: url.username, password: url.password, database: url.database, tls: .disable),
                id: 7, logger: logger)
            do {
                var tables: [String] = []
                let named = try await connection.query(
                    """
                    SELECT table_name::text FROM information_schema.columns
                    WHERE table_schema = 'public' AND column_name = \(column) AND data_type IN ('text', 'character varying')
                    """, logger: logger)
                for try await table in named.decode(String.self) { tables.append(table) }
                for table in tables {
                    let counted = try await connection.query(
                        PostgresQuery(
                            unsafeSQL: "SELECT count(*) FROM \(table) WHERE \(column) = $1",
                            binds: {
                                var binds = PostgresBindings()
                                binds.append(value)
                                return binds
                            }()), logger: logger)
                    for try await count in counted.decode(Int64.self) where count > 0 { found[table] = Int(count) }
                }
            } catch {
                try? await connection.close()
                throw error
            }
            try await connection.close()
        } else {
            let db = try DatabaseQueue(path: stack.databasePath)
            found = try await db.read { db in
                var found: [String: Int] = [:]
                for table in try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table'") {
                    let columns = try Row.fetchAll(db, sql: "SELECT name FROM pragma_table_info(?)", arguments: [table]).map { $0[0] as String }
                    let types = try Row.fetchAll(db, sql: "SELECT name, type FROM pragma_table_info(?)", arguments: [table])
                    guard columns.contains(column),
                        types.contains(where: { ($0[0] as String) == column && (($0[1] as String?) ?? "").uppercased() == "TEXT" })
                    else { continue }
                    let count = try Int.fetchOne(db, sql: "SELECT count(*) FROM \"\(table)\" WHERE \"\(column)\" = ?", arguments: [value]) ?? 0
                    if count > 0 { found[table] = count }
                }
                return found
            }
        }
        return found
    }

    /// Every place in the stack's Redis that names `text` (key names, hash fields and values, members, values, stream
    /// entries), except the live queues (webhooks, jobs, pushes): what is in flight there is consumed by the workers
    /// and the pusher, which drop a deleted account's entries.
    static func redisTraces(_ stack: Stack, of text: String) async throws -> [String] {
        let queues = Set(RoundupStream.allCases.flatMap { $0.parts(stack.keys).map(\.stream) })
        var traces: [String] = []
        // Every primary's keys (a stack may run on a cluster).
        var found: [String] = []
        try await stack.redis.scanEveryPrimary(matching: stack.prefix + "*") { found += $0 }
        for key in found where !queues.contains(key) {
            if key.contains(text) { traces.append("key \(key)") }
            let type = try await stack.redis.send("TYPE", RedisArgument(key)).string ?? ""
            let contents: RedisValue
            switch type {
            case "string": contents = try await stack.redis.send("GET", RedisArgument(key))
            case "hash": contents = try await stack.redis.send("HGETALL", RedisArgument(key))
            case "set": contents = try await stack.redis.send("SMEMBERS", RedisArgument(key))
            case "zset": contents = try await stack.redis.send("ZRANGE", RedisArgument(key), "0", "-1")
            case "list": contents = try await stack.redis.send("LRANGE", RedisArgument(key), "0", "-1")
            case "stream": contents = try await stack.redis.send("XRANGE", RedisArgument(key), "-", "+")
            default: contents = .null
            }
            if "\(Self.flatten(contents))".contains(text) { traces.append("\(type) \(key)") }
        }
        return traces
    }

    static func flatten(_ value: RedisValue) -> [String] {
        switch value {
        case .array(let items): return items.flatMap(flatten)
        default: return value.string.map { [$0] } ?? []
        }
    }

    /// A request to the API with its response headers (Stack.callAPI keeps status and body only).
    static func callWithHeaders(
        _ stack: Stack, _ method: HTTPMethod, _ path: String, token: String?
    ) async throws -> (status: HTTPResponseStatus, headers: HTTPHeaders, body: String) {
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(stack.apiPort)\(path)")
        request.method = method
        if let token { request.headers.add(name: "authorization", value: "Bearer \(token)") }
        let response = try await stack.http.execute(request, timeout: .seconds(20))
        let body = try await response.body.collect(upTo: 1 << 20)
        return (response.status, response.headers, String(buffer: body))
    }

    static func metric(_ stack: Stack, _ series: String) async throws -> Double {
        OperationsTests.value(try await stack.callAPI(.GET, "/metrics", token: nil).body, series) ?? 0
    }

    // MARK: Deleting always works

    @Test(arguments: StoreBackend.available) func deletingTheAccountWithARevokedTrelloTokenLeavesNothingOfIt(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        try await stack.startIngress()
        try await stack.startAPI(bootstrapToken: Self.apiBootstrap)
        let owner = try await pairedAccount(stack, lists: 2)
        let account = owner.account
        // Another account, whose traces must all stay.
        let bystander = try await stack.store().createAccount(authTokenHash: UUID().uuidString)

        // Traces of use: rows of every kind, a device, a sync job, a delivery (its dedupe mark), the rate-limit count
        // (every call above), a dead letter and a deferred push as the worker and the pusher leave them.
        for (n, list) in owner.lists.enumerated() { try await seedRows(stack, account: account, syncList: list.id, n: n) }
        let device = #"{"device_id":"phone-1","apns_token":"\#(String(repeating: "ab", count: 32))","platform":"ios","environment":"sandbox"}"#
        #expect(try await stack.callAPI(.POST, "/dailyroundup/devices", token: owner.token, body: device).status == .created)
        _ = try await stack.store().submitJob(
            accountID: account, kind: .import, deviceID: nil, idempotencyKey: "import-1",
            payload: .object(["sync_list_id": .string(owner.lists[0].id)]),
            total: 0, staleAfter: 60)
        let first = owner.lists[0]
        let delivery = WebhookBodies.body(
            type: "createCard", actionID: "a-1", cardID: Self.trelloID("c9", 1), listID: first.list, boardID: first.board)
        let delivered = try await stack.postWebhook(path: try await stack.webhookPath(account: account), body: delivery, secret: Self.apiSecret)
        #expect(delivered.status == .ok, "\(delivered.body)")
        for owner in [account, bystander] {
            _ = try await stack.redis.send(
                "XADD", RedisArgument(stack.keys.deadLetterStream(WebhookShard(account: owner))), "*", "account", RedisArgument(owner), "action",
                "a-dead", "body", "{}", "error",
                "x")
            _ = try await stack.redis.send("ZADD", RedisArgument(stack.keys.deferredPushes), "1", RedisArgument(owner + "|phone-1"))
            _ = try await stack.redis.send("SET", RedisArgument(stack.keys.recentPush(account: owner, device: "phone-1")), "1", "PX", "60000")
        }
        #expect(try await Self.rows(stack, column: "account_id", value: account).count >= 8)
        #expect(try await Self.redisTraces(stack, of: account).count >= 6)

        // The user revokes the app's token in Trello, then deletes the account.
        stack.trello.revokeToken("test-token")
        let hooks = Set(stack.trello.webhooks.map(\.id))
        let deleted = try await stack.callAPI(.DELETE, "/dailyroundup/account", token: owner.token)
        #expect(deleted.status == .noContent, "\(deleted.body)")
        #expect(try await stack.callAPI(.GET, "/dailyroundup/account", token: owner.token).status == .unauthorized)

        // Nothing of it is stored, credentials included; the bystander keeps everything.
        #expect(try await Self.rows(stack, column: "account_id", value: account) == [:])
        #expect(try await Self.rows(stack, column: "id", value: account) == [:])
        // But for the deletion's tombstone (RoutingWrites: it refuses any later publication of the account, holds only
        // versions, and expires within a day).
        let tombstone = stack.keys.routingVersions(account: account)
        let traces = try await Self.redisTraces(stack, of: account).filter { !$0.hasSuffix(" " + tombstone) }
        #expect(traces == [], "\(traces)")
        let tombstoneTTL = try #require(try await stack.redis.send("TTL", RedisArgument(tombstone)).int)
        #expect((1...86_400).contains(tombstoneTTL))
        let others = try await Self.redisTraces(stack, of: bystander)
        #expect(others.count == 3, "\(others)")
        #expect(try await Self.rows(stack, column: "id", value: bystander) == ["accounts": 1])

        // The webhooks Trello would not delete are still there, and the operator is told which.
        #expect(Set(stack.trello.webhooks.map(\.id)) == hooks)
        #expect(try await Self.metric(stack, #"roundup_webhooks_orphaned_total{reason="revoked"}"#) == Double(hooks.count))
        let log = try #require(stack.api).output
        #expect(log.contains("webhooks may remain at trello") && hooks.allSatisfy { log.contains($0) }, "\(log.suffix(2000))")
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func deletingAListWhenTrelloRefusesOrIsDownStillDeletesIt(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        try await stack.startIngress()
        try await stack.startAPI(bootstrapToken: Self.apiBootstrap)
        let owner = try await pairedAccount(stack, lists: 3)
        for (n, list) in owner.lists.enumerated() { try await seedRows(stack, account: owner.account, syncList: list.id, n: n) }
        let hooksBefore = stack.trello.webhooks

        // 1. The token was revoked: Trello answers 401 for the webhook deletes.
        stack.trello.revokeToken("test-token")
        let revoked = owner.lists[0]
        #expect(try await stack.callAPI(.DELETE, "/dailyroundup/lists/\(revoked.id)", token: owner.token).status == .noContent)
        // 2. Trello is failing (503 on every webhook request, retries included).
        stack.trello.addToken("test-token")
        stack.trello.failNextRequests(status: 503, count: 100, pathPrefix: "/1/webhooks/")
        let failing = owner.lists[1]
        #expect(try await stack.callAPI(.DELETE, "/dailyroundup/lists/\(failing.id)", token: owner.token).status == .noContent)
        stack.trello.failNextRequests(status: 503, count: 0)

        for gone in [revoked, failing] {
            #expect(try await stack.callAPI(.GET, "/dailyroundup/lists/\(gone.id)", token: owner.token).status == .notFound)
            #expect(try await Self.rows(stack, column: "sync_list_id", value: gone.id) == [:])
            #expect(try await Self.rows(stack, column: "id", value: gone.id) == [:])
            for model in [gone.list, gone.board] {
                #expect(
                    try await stack.redis.send("SISMEMBER", RedisArgument(stack.keys.modelRoute(model)), RedisArgument(owner.account)) == .integer(0))
            }
        }
        // The third list is untouched, and Trello still has the webhooks it was not able to delete.
        let kept = owner.lists[2]
        let listed = try await stack.callAPI(.GET, "/dailyroundup/lists", token: owner.token)
        #expect(listed.json["lists"]?.arrayValue?.compactMap { $0["sync_list_id"]?.stringValue } == [kept.id])
        #expect(try await Self.rows(stack, column: "sync_list_id", value: kept.id).count >= 3)
        #expect(try await stack.redis.send("SISMEMBER", RedisArgument(stack.keys.modelRoute(kept.list)), RedisArgument(owner.account)) == .integer(1))
        #expect(stack.trello.webhooks == hooksBefore)
        #expect(try await Self.metric(stack, #"roundup_webhooks_orphaned_total{reason="revoked"}"#) == 2)
        #expect(try await Self.metric(stack, #"roundup_webhooks_orphaned_total{reason="unreachable"}"#) == 2)
        await stack.shutdown()
    }

    // MARK: Resolutions racing a list deletion

    /// In this process (`InProcessAPI`): the concurrent requests go through the API's router without a socket.
    @Test(arguments: StoreBackend.available) func resolvingWhileTheListIsDeletedNeverFailsTheServer(backend: StoreBackend) async throws {
        try await InProcessAPI.run(store: backend, bootstrapToken: Self.apiBootstrap) { api in try await self.resolvingWhileTheListIsDeleted(api) }
    }

    func resolvingWhileTheListIsDeleted(_ api: InProcessAPI) async throws {
        let (account, token) = try await api.createAccount(bootstrap: Self.apiBootstrap)
        let store = api.store
        try await store.updateAccountCredentials(id: account, apiKey: "test-api-key", token: "test-token", webhookSecret: Self.apiSecret)
        // Every Trello call takes a while, so the deletion lands before, during and after each resolution's writes.
        api.trello.setRequestDelay(.milliseconds(120))

        let delays = [0, 20, 60, 110, 160, 230, 320, 450]
        var statuses: [String: [UInt]] = [:]
        for (round, delay) in delays.enumerated() {
            let list = Self.trelloID("a2", round), board = Self.trelloID("b2", round)
            let sync = try await store.createSyncList(accountID: account, name: "Race \(round)", trelloBoardID: board, trelloListID: list)
            try await seedRows(store, account: account, syncList: sync.id, n: round)
            api.trello.setCard(FakeTrello.card(id: Self.trelloID("c1", round), listID: list, boardID: board, name: "seeded \(round)"))
            api.trello.setCard(FakeTrello.card(id: Self.trelloID("c2", round), listID: list, boardID: board, name: "from Trello"))
            let conflict = try #require(try await store.conflicts(accountID: account).first { $0.syncListID == sync.id }).id
            let duplicate = try #require(try await store.duplicates(accountID: account).first { $0.syncListID == sync.id }).id
            let action = round.isMultiple(of: 2) ? "merge" : "keep_both"
            let choice = ["trello", "reminders", "value"][round % 3]
            let conflictBody = choice == "value" ? #"{"choice":"value","value":"chosen"}"# : #"{"choice":"\#(choice)"}"#
            let answers = try await withThrowingTaskGroup(of: (String, UInt).self) { group in
                group.addTask {
                    (
                        "conflict",
                        try await api.call(.POST, "/dailyroundup/conflicts/\(conflict)/resolve", token: token, body: conflictBody).status.code
                    )
                }
                group.addTask {
                    (
                        "duplicate",
                        try await api.call(.POST, "/dailyroundup/duplicates/\(duplicate)/resolve", token: token, body: #"{"action":"\#(action)"}"#)
                            .status.code
                    )
                }
                group.addTask {
                    try await Task.sleep(for: .milliseconds(delay))
                    return ("delete", try await api.call(.DELETE, "/dailyroundup/lists/\(sync.id)", token: token).status.code)
                }
                var answers: [(String, UInt)] = []
                for try await answer in group { answers.append(answer) }
                return answers
            }
            for (what, status) in answers { statuses[what, default: []].append(status) }
        }
        #expect(statuses["delete"]?.allSatisfy { $0 == 204 } == true, "\(statuses)")
        for what in ["conflict", "duplicate"] {
            #expect(
                statuses[what]?.count == delays.count && statuses[what]?.allSatisfy { [200, 404, 409].contains($0) } == true, "\(what): \(statuses)")
        }
        // The API still answers; every list and what it held is gone.
        #expect(try await api.call(.GET, "/healthz", token: nil).status == .ok)
        #expect(try await api.call(.GET, "/dailyroundup/lists", token: token).json["lists"] == .array([]))
        #expect(try await store.conflicts(accountID: account).isEmpty)
        #expect(try await store.duplicates(accountID: account).isEmpty)
    }

    // MARK: Throttling the unauthenticated

    @Test(arguments: StoreBackend.available) func guessedTokensFromOneAddressAreThrottledBeforeTheyCostAStoreQuery(backend: StoreBackend) async throws
    {
        let stack = try await Stack(store: backend)
        try await stack.startAPI(bootstrapToken: Self.apiBootstrap)  // ROUNDUP_AUTH_FAILURE_LIMIT: the default, 30
        let created = try await stack.callAPI(.POST, "/dailyroundup/account", token: Self.apiBootstrap)
        let token = try #require(created.json["auth_token"]?.stringValue)
        let limit = 30
        let lookups = try await Self.metric(stack, "roundup_api_token_lookups_total")

        // Up to the limit, each guess is looked up and refused.
        for i in 0..<limit {
            let guess = "rt_guess\(i)-\(UUID().uuidString)"
            #expect(try await stack.callAPI(.GET, "/dailyroundup/changes", token: guess).status == .unauthorized)
        }
        #expect(try await Self.metric(stack, "roundup_api_token_lookups_total") == lookups + Double(limit))
        // Over it: 429 with Retry-After and the JSON error, without a store query, for guesses and wrong bootstrap tokens.
        for i in 0..<10 {
            let answer = try await Self.callWithHeaders(stack, .GET, "/dailyroundup/lists", token: "rt_more\(i)-\(UUID().uuidString)")
            #expect(answer.status == .tooManyRequests, "\(answer.body)")
            let retry = answer.headers.first(name: "retry-after").flatMap { Int($0) }
            #expect(retry.map { (1...60).contains($0) } == true, "\(answer.headers)")
            let json = try JSONParser.parse(Array(answer.body.utf8))
            #expect(json["error"]?["code"] == "too_many_failures" && json["error"]?["message"]?.stringValue != nil)
        }
        #expect(try await stack.callAPI(.POST, "/dailyroundup/account", token: "wrong-bootstrap-0123456789").status == .tooManyRequests)
        #expect(try await Self.metric(stack, "roundup_api_token_lookups_total") == lookups + Double(limit))
        // A guess already refused from this address is refused again from Redis, still without the store.
        #expect(try await stack.callAPI(.GET, "/dailyroundup/changes", token: "rt_guess0-nope").status != .ok)
        // The address is over its budget: the bootstrap token waits for the window to end, but a token that works is no
        // guess (the phones behind a carrier's NAT share the address): it is looked up, once, and answered.
        #expect(try await stack.callAPI(.POST, "/dailyroundup/account", token: Self.apiBootstrap).status == .tooManyRequests)
        #expect(try await stack.callAPI(.GET, "/dailyroundup/account", token: token).status == .ok)
        #expect(try await stack.callAPI(.GET, "/dailyroundup/account", token: token).status == .ok)
        #expect(try await Self.metric(stack, "roundup_api_token_lookups_total") == lookups + Double(limit) + 1)

        // The count is bounded (one set of at most `limit` hashes per address) and expires with its window.
        let key = RedisArgument(stack.keys.authFailures(address: "127.0.0.1"))
        #expect(try await stack.redis.send("SCARD", key).int == limit)
        let ttl = try #require(try await stack.redis.send("PTTL", key).int)
        #expect((1...60_000).contains(ttl))
        // The window ends (made to end now): the valid token works again, guesses are counted afresh.
        _ = try await stack.redis.send("PEXPIRE", key, "1")
        try await Task.sleep(for: .milliseconds(20))
        #expect(try await stack.callAPI(.GET, "/dailyroundup/account", token: token).status == .ok)
        #expect(try await stack.callAPI(.GET, "/dailyroundup/changes", token: "rt_after-\(UUID().uuidString)").status == .unauthorized)
        #expect(try await stack.callAPI(.POST, "/dailyroundup/account", token: Self.apiBootstrap).status == .created)
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func behindAProxyEachForwardedClientHasItsOwnBudget(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        try await stack.startAPI(bootstrapToken: Self.apiBootstrap)
        let created = try await stack.callAPI(.POST, "/dailyroundup/account", token: Self.apiBootstrap)
        let token = try #require(created.json["auth_token"]?.stringValue)
        // The test client is on loopback: to the API, a proxy (as nginx or an ingress controller is), forwarding clients.
        func call(from forwarded: String, _ token: String) async throws -> HTTPResponseStatus {
            try await stack.callAPI(.GET, "/dailyroundup/account", token: token, headers: ["X-Forwarded-For": forwarded]).status
        }
        for i in 0..<30 { #expect(try await call(from: "203.0.113.7", "rt_guess\(i)-\(UUID().uuidString)") == .unauthorized) }
        #expect(try await call(from: "203.0.113.7", "rt_next-\(UUID().uuidString)") == .tooManyRequests)
        // A token that works still works from there (it is no guess).
        #expect(try await call(from: "203.0.113.7", token) == .ok)
        // The guesser cannot name another address itself: the proxy appends the one it saw, and that one counts.
        #expect(try await call(from: "198.51.100.9, 203.0.113.7", "rt_other-\(UUID().uuidString)") == .tooManyRequests)
        #expect(try await call(from: "203.0.113.7, 10.0.0.2", "rt_two-\(UUID().uuidString)") == .tooManyRequests)  // through two proxies
        // Other clients of the same proxy, and the proxy itself, keep their own budgets.
        #expect(try await call(from: "203.0.113.8", token) == .ok)
        #expect(try await call(from: "198.51.100.9", token) == .ok)
        #expect(try await stack.callAPI(.GET, "/dailyroundup/account", token: token).status == .ok)
        // An IPv6 client counts by its /64: hopping addresses inside it buys nothing.
        for i in 0..<30 { #expect(try await call(from: "2001:db8:1:2::\(i + 1)", "rt_six\(i)-\(UUID().uuidString)") == .unauthorized) }
        #expect(try await call(from: "2001:db8:1:2:ffff::99", "rt_hop-\(UUID().uuidString)") == .tooManyRequests)
        #expect(try await call(from: "2001:db8:1:3::1", "rt_hop-\(UUID().uuidString)") == .unauthorized)
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func theThrottleFailsOpenWithoutRedis(backend: StoreBackend) async throws {
        // Redis gone: bad tokens are still 401 (not 429, not 5xx), a valid token still works, the throttle says why.
        let stack = try await Stack(store: backend, privateRedis: true)
        try await stack.startAPI(bootstrapToken: Self.apiBootstrap)
        let created = try await stack.callAPI(.POST, "/dailyroundup/account", token: Self.apiBootstrap)
        let token = try #require(created.json["auth_token"]?.stringValue)
        await stack.privateRedis?.stop()
        for i in 0..<5 {
            #expect(try await stack.callAPI(.GET, "/dailyroundup/changes", token: "rt_guess\(i)").status == .unauthorized)
        }
        #expect(try await stack.callAPI(.GET, "/dailyroundup/account", token: token).status == .ok)
        #expect(try #require(stack.api).output.contains("authentication throttle unavailable"))
        await stack.shutdown()
    }

    /// In this process (`InProcessAPI`), where every request comes from the client address "local".
    @Test(arguments: StoreBackend.available) func anAuthFailureLimitOf0TurnsTheThrottleOff(backend: StoreBackend) async throws {
        try await InProcessAPI.run(store: backend, bootstrapToken: Self.apiBootstrap, environment: ["ROUNDUP_AUTH_FAILURE_LIMIT": "0"]) {
            api async throws in
            for i in 0..<40 {
                #expect(try await api.call(.GET, "/dailyroundup/changes", token: "rt_guess\(i)").status == .unauthorized)
            }
            #expect(try await api.redis.send("EXISTS", RedisArgument(api.keys.authFailures(address: "local"))).int == 0)
        }
    }

    /// The same throttle in this process: over the limit, 429 with Retry-After for any guess, but a token the store
    /// accepted lately (`RedisKeys.acceptedToken`) keeps working, kept by the API (`TokenCache`: one round trip to the
    /// account's slot checks the epoch and counts, the throttle not asked) or not; one without that mark is refused like
    /// a guess once no process keeps it and, refused, is not counted against its account. A failure set left without a
    /// TTL gets its window back.
    @Test(arguments: StoreBackend.available) func theThrottleAnswers429InProcess(backend: StoreBackend) async throws {
        try await InProcessAPI.run(store: backend, bootstrapToken: Self.apiBootstrap, environment: ["ROUNDUP_AUTH_FAILURE_LIMIT": "3"]) { api in
            let (account, token) = try await api.createAccount(bootstrap: Self.apiBootstrap)
            let hash = AuthenticationMiddleware.hash(token)
            #expect(try await api.call(.GET, "/dailyroundup/account", token: token).status == .ok)
            #expect(api.api.authentication.tokens.kept(hash) != nil)
            for i in 0..<3 {
                #expect(try await api.call(.GET, "/dailyroundup/changes", token: "rt_guess\(i)").status == .unauthorized)
            }
            let failures = RedisArgument(api.keys.authFailures(address: "local"))
            #expect(try await api.redis.send("SCARD", failures).int == 3)
            func counted() async throws -> Int {
                let minute = RateLimit.currentMinute()
                var total = 0
                for window in [minute - 1, minute] {
                    total += try await api.redis.send("GET", RedisArgument(RateLimit.key(api.keys, account: account, minute: window))).int ?? 0
                }
                return total
            }
            // A new guess: 429 with the rest of the window.
            let guess = try await api.call(.GET, "/dailyroundup/changes", token: "rt_guess_new")
            #expect(guess.status == .tooManyRequests, "\(guess.body)")
            #expect(guess.headers[.retryAfter].flatMap { Int($0) }.map { (1...60).contains($0) } == true)
            #expect(guess.json["error"]?["code"] == "too_many_failures")
            // The working token, kept and then not kept: answered, and counted.
            var before = try await counted()
            #expect(try await api.call(.GET, "/dailyroundup/account", token: token).status == .ok)
            api.api.authentication.tokens.forget(hash)
            #expect(try await api.call(.GET, "/dailyroundup/account", token: token).status == .ok)
            #expect(try await counted() == before + 2)
            // Without its mark (not used for a day): while kept (the store found it within `TokenCache.lifetime`, no
            // revocation since) it is no guess, answered and counted without asking the throttle; once no longer kept it
            // is refused like a guess, and not counted.
            let accepted = RedisArgument(api.keys.acceptedToken(hash))
            #expect(try await api.redis.send("EXISTS", accepted).int == 1)
            _ = try await api.redis.send("DEL", accepted)
            before = try await counted()
            #expect(api.api.authentication.tokens.kept(hash) != nil)
            for _ in 0..<2 { #expect(try await api.call(.GET, "/dailyroundup/account", token: token).status == .ok) }
            #expect(try await counted() == before + 2)
            before = try await counted()
            api.api.authentication.tokens.forget(hash)
            for _ in 0..<2 {
                let throttled = try await api.call(.GET, "/dailyroundup/account", token: token)
                #expect(throttled.status == .tooManyRequests, "\(throttled.body)")
                #expect(throttled.json["error"]?["code"] == "too_many_failures")
            }
            #expect(api.api.authentication.tokens.kept(hash) == nil)
            #expect(try await counted() == before, "a request the throttle refused is not counted")
            // A token that failed from this address before (its hash prefix among the failures) is refused as a repeated
            // failure, before the address's budget is looked at.
            let member = AuthThrottle.Attempt(bucket: "local", .token, tokenHash: hash).member
            _ = try await api.redis.send("SADD", failures, RedisArgument(member))
            let repeated = try await api.call(.GET, "/dailyroundup/account", token: token)
            #expect(repeated.status == .unauthorized && repeated.headers[.retryAfter] == nil, "\(repeated.body)")
            _ = try await api.redis.send("SREM", failures, RedisArgument(member))
            #expect(try await api.call(.GET, "/dailyroundup/changes", token: "rt_guess0").status == .unauthorized, "repeated from Redis")

            // Left without a TTL (by hand, or an older version): the next check gives the window back.
            for probe in [token, "rt_other"] {
                _ = try await api.redis.send("PERSIST", failures)
                #expect(try await api.redis.send("PTTL", failures).int == -1)
                let throttled = try await api.call(.GET, "/dailyroundup/account", token: probe)
                #expect(throttled.status == .tooManyRequests && throttled.headers[.retryAfter] == "60", "\(throttled.headers)")
                #expect(try await api.redis.send("PTTL", failures).int.map { (1...60_000).contains($0) } == true)
            }
        }
    }
}
