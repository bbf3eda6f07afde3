import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import RoundupCore
import RoundupRedis
import RoundupStore
import RoundupTesting
import Testing

/// What the open internet sends: floods of junk, stalled connections, absurd ids, a full Redis, poison entries,
/// forged webhooks, revoked tokens, races and cold starts, against the real processes. Each test asserts the outcome
/// (what Trello, the apps and the operator see), not the mechanism. Parts live in `HostileTrafficTests+*.swift`.
@Suite(.serialized) struct HostileTrafficTests {
    static let secret = "whsec-0123456789abcdef"

    /// An account with a synced list (L1 on board B1), created in the store, its secret and routes published.
    func seed(_ stack: Stack) async throws -> (store: any ServerStore, account: String) {
        let store = try await stack.store()
        let account = try await store.createAccount(authTokenHash: UUID().uuidString)
        try await store.updateAccountCredentials(id: account, apiKey: "test-api-key", token: "test-token", webhookSecret: Self.secret)
        _ = try await store.createSyncList(accountID: account, name: "Groceries", trelloBoardID: "B1", trelloListID: "L1")
        _ = try await stack.redis.send("HSET", RedisArgument(stack.keys.webhookSecrets), RedisArgument(account), RedisArgument(Self.secret))
        _ = try await stack.redis.send("SADD", RedisArgument(stack.keys.modelRoute("L1")), RedisArgument(account))
        return (store, account)
    }

    /// Resident memory of a process, from the kernel's accounting.
    static func residentKB(_ pid: pid_t) throws -> Int {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") })
        return try #require(Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]))
    }

    static func randomHex(_ count: Int) -> String {
        String((0..<count).map { _ in "0123456789abcdef".randomElement() ?? "0" })
    }

    /// Sends `count` requests made by `make`, `concurrency` at a time; returns the statuses seen.
    static func flood(
        _ http: HTTPClient, count: Int, concurrency: Int = 16, make: @escaping @Sendable (Int) -> HTTPClientRequest
    ) async throws -> [UInt: Int] {
        try await withThrowingTaskGroup(of: UInt.self) { group in
            var statuses: [UInt: Int] = [:]
            var next = 0
            func add() {
                let request = make(next)
                next += 1
                group.addTask {
                    let response = try await http.execute(request, timeout: .seconds(20))
                    _ = try await response.body.collect(upTo: 1 << 20)
                    return response.status.code
                }
            }
            for _ in 0..<min(concurrency, count) { add() }
            while let status = try await group.next() {
                statuses[status, default: 0] += 1
                if next < count { add() }
            }
            return statuses
        }
    }

    // MARK: Floods of junk

    @Test func uniqueJunkFloodsLeaveMemoryFlatAndEnqueueNothing() async throws {
        let stack = try await Stack()
        let (_, account) = try await seed(stack)
        try await stack.startIngress()
        let ingress = try #require(stack.ingress)
        let base = "http://127.0.0.1:\(stack.ingressPort)/dailyroundup/webhook/trello"
        let fat = String(repeating: "x", count: 64 * 1024)

        // Four kinds of junk, each unique: a 64 KB model id and a 64 KB account in the path (refused by their shape),
        // and well-shaped ids nobody uses (looked up once, remembered as unknown in a bounded cache).
        let round: @Sendable (Int) -> HTTPClientRequest = { i in
            let unique = "\(i)-\(UUID().uuidString)"
            var request: HTTPClientRequest
            switch i % 4 {
            case 0:
                request = HTTPClientRequest(url: base)
                request.body = .bytes(ByteBuffer(string: #"{"action":{"id":"a\#(i)","type":"updateCard"},"model":{"id":"\#(fat)\#(unique)"}}"#))
            case 1:
                request = HTTPClientRequest(url: base + "/" + fat.prefix(8 * 1024) + unique)
                request.body = .bytes(ByteBuffer(string: #"{"action":{"id":"a\#(i)","type":"updateCard"}}"#))
            case 2:
                request = HTTPClientRequest(url: base)
                request.body = .bytes(ByteBuffer(string: #"{"action":{"id":"a\#(i)","type":"updateCard"},"model":{"id":"\#(HostileTrafficTests.randomHex(24))"}}"#))
            default:
                request = HTTPClientRequest(url: base + "/" + UUID().uuidString.lowercased())
                request.body = .bytes(ByteBuffer(string: #"{"action":{"id":"a\#(i)","type":"updateCard"},"pad":"\#(fat)"}"#))
            }
            request.method = .POST
            request.headers.add(name: "content-type", value: "application/json")
            request.headers.add(name: "x-trello-webhook", value: "bm90IGEgc2lnbmF0dXJl")
            return request
        }
        let first = try await Self.flood(stack.http, count: 1_000, make: round)
        let afterFirst = try Self.residentKB(ingress.pid)
        let second = try await Self.flood(stack.http, count: 1_000, make: round)
        let afterSecond = try Self.residentKB(ingress.pid)

        for statuses in [first, second] {
            #expect(statuses.keys.allSatisfy { (400..<500).contains($0) }, "\(statuses)")
            #expect(statuses.values.reduce(0, +) == 1_000)
        }
        // A second round of as much unique junk adds (next to) nothing: what the first left is bounded, not growing.
        #expect(afterSecond - afterFirst < 10 * 1024, "resident \(afterFirst) KB → \(afterSecond) KB")
        #expect(afterSecond < 60 * 1024, "resident \(afterSecond) KB")
        #expect(try await stack.streamLength() == 0)

        // A real delivery still gets through.
        let body = WebhookBodies.body(type: "createCard", actionID: "real-1", cardID: "C1", listID: "L1", boardID: "B1")
        let response = try await stack.postWebhook(path: "/dailyroundup/webhook/trello/\(account)", body: body, secret: Self.secret)
        #expect(response.status == .ok, "\(response.body)")
        #expect(try await stack.streamLength() == 1)
        await stack.shutdown()
    }

    @Test func absurdIdsCorrectlySignedAreRefusedAndNothingIsEnqueued() async throws {
        let stack = try await Stack()
        let (_, account) = try await seed(stack)
        try await stack.startIngress()
        let path = "/dailyroundup/webhook/trello/\(account)"
        func body(action: String = "A1", card: String = "C1", list: String = "L1", model: String = "L1") -> [UInt8] {
            Array(#"{"action":{"id":"\#(action)","type":"updateCard","data":{"card":{"id":"\#(card)","name":"x"},"list":{"id":"\#(list)"},"board":{"id":"B1"}}},"model":{"id":"\#(model)"}}"#.utf8)
        }
        let cases: [(String, [UInt8])] = [
            ("300 KB action id", body(action: String(repeating: "a", count: 300 * 1024))),
            ("escaped NUL in the action id", body(action: #"A\u0000B"#)),
            ("escaped NUL in the card id", body(card: #"C\u0000"#)),
            ("a bell in the card id", body(card: #"C\u0007"#)),
            ("a newline in the list id", body(list: #"L\n1"#)),
            ("100 KB list id", body(list: String(repeating: "L", count: 100 * 1024))),
            ("a colon in the model id", body(model: "L1:x")),
            ("unicode in the action id", body(action: "Ä1")),
            ("empty card id", body(card: "")),
        ]
        for (name, payload) in cases {
            let response = try await stack.postWebhook(path: path, body: payload, secret: Self.secret)
            #expect(response.status == .badRequest, "\(name): \(response.status) \(response.body)")
            #expect(response.json["error"]?["code"]?.stringValue == "invalid_id", "\(name): \(response.body)")
        }
        // Path segments that are not an account id's shape never reach a lookup.
        for segment in ["%00", "a%07b", String(repeating: "f", count: 10_000), "../../etc"] {
            let response = try await stack.postWebhook(path: "/dailyroundup/webhook/trello/\(segment)", body: body(), secret: Self.secret)
            #expect(response.status == .notFound, "\(segment.prefix(20)): \(response.status)")
        }
        #expect(try await stack.streamLength() == 0)
        #expect(stack.ingress?.isRunning == true)
        await stack.shutdown()
    }

    // MARK: Stalled connections

    /// Opens `count` connections that stall: half in the request head, half in the body.
    static func stall(port: Int, path: String, count: Int) async throws -> [RawConnection] {
        var connections: [RawConnection] = []
        for i in 0..<count {
            let connection = try await RawConnection.connect(port: port)
            if i % 2 == 0 {
                try await connection.send("POST \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            } else {
                try await connection.send("POST \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n{\"act")
            }
            connections.append(connection)
        }
        return connections
    }

    @Test func stalledConnectionsAreClosedAndDoNotDelayARealDelivery() async throws {
        let stack = try await Stack()
        let (_, account) = try await seed(stack)
        let limits = ["ROUNDUP_HTTP_HEAD_TIMEOUT_SECONDS": "2", "ROUNDUP_HTTP_BODY_TIMEOUT_SECONDS": "2", "ROUNDUP_HTTP_IDLE_TIMEOUT_SECONDS": "2"]
        try await stack.startIngress(extra: limits)
        try await stack.startAPI(bootstrapToken: "bootstrap-token-0123456789", extra: limits)
        let path = "/dailyroundup/webhook/trello/\(account)"

        let onIngress = try await Self.stall(port: stack.ingressPort, path: path, count: 300)
        let onAPI = try await Self.stall(port: stack.apiPort, path: "/dailyroundup/account", count: 300)

        // Beside 600 stalled clients, a real delivery and a real API call are answered at once.
        let started = ContinuousClock.now
        let body = WebhookBodies.body(type: "createCard", actionID: "beside-stalled", cardID: "C1", listID: "L1", boardID: "B1")
        let delivery = try await stack.postWebhook(path: path, body: body, secret: Self.secret)
        let deliveryTime = ContinuousClock.now - started
        #expect(delivery.status == .ok, "\(delivery.body)")
        #expect(deliveryTime < .milliseconds(500), "delivery took \(deliveryTime)")
        let apiStarted = ContinuousClock.now
        let created = try await stack.callAPI(.POST, "/dailyroundup/account", token: "bootstrap-token-0123456789", body: "{}")
        let apiTime = ContinuousClock.now - apiStarted
        #expect(created.status == .created, "\(created.body)")
        #expect(apiTime < .milliseconds(500), "API call took \(apiTime)")

        // The server, not the client, ends every stalled connection: within the deadline and a little slack.
        var open = 0
        for connection in onIngress + onAPI where !(await connection.waitClosed(timeout: .seconds(6))) { open += 1 }
        #expect(open == 0, "\(open) stalled connections still open")
        // An idle kept-alive connection is closed too, after its idle timeout.
        let idle = try await RawConnection.connect(port: stack.ingressPort)
        try await idle.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        #expect(await idle.waitClosed(timeout: .seconds(6)))
        #expect(stack.ingress?.isRunning == true)
        #expect(stack.api?.isRunning == true)
        for connection in onIngress + onAPI { await connection.close() }
        await stack.shutdown()
    }

    @Test func oversizedHeadersGetAJSONErrorNotACrash() async throws {
        let stack = try await Stack()
        _ = try await seed(stack)
        try await stack.startIngress(extra: ["ROUNDUP_HTTP_MAX_HEADER_BYTES": "4096"])
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(stack.ingressPort)/dailyroundup/webhook/trello")
        request.method = .POST
        request.headers.add(name: "x-padding", value: String(repeating: "p", count: 8_000))
        request.body = .bytes(ByteBuffer(string: "{}"))
        let response = try await stack.http.execute(request, timeout: .seconds(10))
        let text = String(buffer: try await response.body.collect(upTo: 1 << 16))
        #expect(response.status.code == 431, "\(response.status) \(text)")
        #expect(text.contains(#""code":"headers_too_large""#), "\(text)")
        #expect(try await stack.get("/healthz").status == .ok)
        await stack.shutdown()
    }

    // MARK: A full Redis

    @Test func aFullRedisAnswers503LosesNothingAndHealsOnceWorkersReturn() async throws {
        let stack = try await Stack(privateRedis: true)
        let (store, account) = try await seed(stack)
        try await stack.startIngress()
        let path = "/dailyroundup/webhook/trello/\(account)"
        let cards = 300
        for i in 0..<cards {
            stack.trello.setCard(FakeTrello.card(id: "F\(i)", listID: "L1", boardID: "B1", name: "Card \(i)", desc: ""))
        }
        // Room for a few hundred KB more than Redis holds now, and no eviction: the burst below fills it.
        let info = try await stack.redis.send("INFO", "memory").string ?? ""
        let used = try #require(info.split(separator: "\r\n").first { $0.hasPrefix("used_memory:") }.flatMap { Int($0.dropFirst("used_memory:".count)) })
        _ = try await stack.redis.send("CONFIG", "SET", "maxmemory-policy", "noeviction")
        _ = try await stack.redis.send("CONFIG", "SET", "maxmemory", RedisArgument(String(used + 600 * 1024)))

        // The workers are away. Trello delivers each action, retries it after a 503 (up to three times), and delivers
        // some twice (once for the list, once for the board).
        var accepted = Set<Int>()
        var statuses: [HTTPResponseStatus: Int] = [:]
        for i in 0..<cards {
            let body = WebhookBodies.body(type: "createCard", actionID: "full-\(i)", cardID: "F\(i)", listID: "L1", boardID: "B1", padding: 3_000)
            for _ in 0..<(i % 4 == 0 ? 2 : 1) {
                for _ in 0..<3 {
                    let response = try await stack.postWebhook(path: path, body: body, secret: Self.secret)
                    statuses[response.status, default: 0] += 1
                    if response.status == .ok {
                        accepted.insert(i)
                        break
                    }
                }
            }
        }
        #expect(Set(statuses.keys).isSubset(of: [.ok, .serviceUnavailable]), "\(statuses)")
        #expect((statuses[.serviceUnavailable] ?? 0) > 0, "Redis never filled: \(statuses)")
        #expect(!accepted.isEmpty)
        #expect(stack.ingress?.isRunning == true)

        // The workers return: every action that ever got a 200 is applied, once.
        try await stack.startWorker(name: "w1")
        let drained = await TestSupport.eventually(timeout: .seconds(60)) {
            (try? await store.pendingChanges(accountID: account, afterID: 0, limit: 500).count) == accepted.count
        }
        let changes = try await store.pendingChanges(accountID: account, afterID: 0, limit: 500)
        #expect(drained, "\(changes.count) changes for \(accepted.count) accepted actions")
        let cardsSeen = changes.map(\.trelloCardID)
        #expect(Set(cardsSeen).count == cardsSeen.count, "a card arrived twice")
        #expect(Set(cardsSeen) == Set(accepted.map { "F\($0)" }))
        #expect(try await stack.redis.send("XLEN", RedisArgument(stack.keys.deadLetterStream)).int == 0)

        // Redis has room again, and the ingress accepts by itself.
        let healed = await TestSupport.eventually(timeout: .seconds(30)) {
            let body = WebhookBodies.body(type: "createCard", actionID: "after-\(UUID().uuidString.prefix(8))", cardID: "F0", listID: "L1", boardID: "B1")
            return (try? await stack.postWebhook(path: path, body: body, secret: Self.secret).status) == .ok
        }
        #expect(healed)
        await stack.shutdown()
    }

    // MARK: Slow batches

    @Test func aBatchSlowerThanTheClaimTimeoutIsProcessedOnce() async throws {
        let stack = try await Stack()
        let (store, account) = try await seed(stack)
        stack.trello.setCard(FakeTrello.card(id: "S1", listID: "L1", boardID: "B1", name: "Slow", desc: ""))
        // Reading the card takes five claim timeouts.
        stack.trello.setCardDelay(.milliseconds(2_000))
        let fast = ["ROUNDUP_CLAIM_IDLE_MS": "400", "ROUNDUP_MAX_DELIVERIES": "2"]
        try await stack.startWorker(name: "w1", extra: fast)
        try await stack.startWorker(name: "w2", extra: fast)
        try await stack.startIngress()
        let body = WebhookBodies.body(type: "createCard", actionID: "slow-1", cardID: "S1", listID: "L1", boardID: "B1")
        #expect(try await stack.postWebhook(path: "/dailyroundup/webhook/trello/\(account)", body: body, secret: Self.secret).status == .ok)
        let arrived = await TestSupport.eventually(timeout: .seconds(20)) {
            (try? await store.pendingChanges(accountID: account, afterID: 0, limit: 10).count) == 1
        }
        #expect(arrived)
        #expect(try await TestSupport.eventually(timeout: .seconds(10)) { try await stack.streamLength() == 0 })
        // Settled: read once, one change, nothing dead-lettered.
        try await Task.sleep(for: .seconds(1))
        #expect(stack.trello.cardRequests == 1, "the card was read \(stack.trello.cardRequests) times")
        #expect(try await store.pendingChanges(accountID: account, afterID: 0, limit: 10).count == 1)
        #expect(try await stack.redis.send("XLEN", RedisArgument(stack.keys.deadLetterStream)).int == 0)
        await stack.shutdown()
    }
}
