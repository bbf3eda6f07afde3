import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStore
import RoundupStreams
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

    // MARK: Floods of junk

    @Test(arguments: StoreBackend.available) func uniqueJunkFloodsLeaveMemoryFlatAndEnqueueNothing(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        let (_, account) = try await seed(stack)
        try await stack.startIngress()
        let ingress = try #require(stack.ingress)
        let port = stack.ingressPort
        let round: @Sendable (Int) -> HTTPClientRequest = { HostileTraffic.junk($0, ingressPort: port) }
        let first = try await HostileTraffic.flood(stack.http, count: 1_000, make: round)
        let afterFirst = try #require(HostileTraffic.residentKB(ingress.pid))
        let second = try await HostileTraffic.flood(stack.http, count: 1_000, make: round)
        let afterSecond = try #require(HostileTraffic.residentKB(ingress.pid))

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

    @Test(arguments: StoreBackend.available) func absurdIdsCorrectlySignedAreRefusedAndNothingIsEnqueued(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        let (_, account) = try await seed(stack)
        try await stack.startIngress()
        let path = "/dailyroundup/webhook/trello/\(account)"
        func body(action: String = "A1", card: String = "C1", list: String = "L1", model: String = "L1") -> [UInt8] {
            Array(
                #"{"action":{"id":"\#(action)","type":"updateCard","data":{"card":{"id":"\#(card)","name":"x"},"list":{"id":"\#(list)"},"board":{"id":"B1"}}},"model":{"id":"\#(model)"}}"#
                    .utf8)
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

    @Test(arguments: StoreBackend.available) func stalledConnectionsAreClosedAndDoNotDelayARealDelivery(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        let (_, account) = try await seed(stack)
        let limits = ["ROUNDUP_HTTP_HEAD_TIMEOUT_SECONDS": "2", "ROUNDUP_HTTP_BODY_TIMEOUT_SECONDS": "2", "ROUNDUP_HTTP_IDLE_TIMEOUT_SECONDS": "2"]
        try await stack.startIngress(extra: limits)
        try await stack.startAPI(bootstrapToken: "bootstrap-token-0123456789", extra: limits)
        let path = "/dailyroundup/webhook/trello/\(account)"

        let onIngress = try await HostileTraffic.stall(port: stack.ingressPort, path: path, count: 300)
        let onAPI = try await HostileTraffic.stall(port: stack.apiPort, path: "/dailyroundup/account", count: 300)

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

    @Test(arguments: StoreBackend.available) func oversizedHeadersGetAJSONErrorNotACrash(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
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

    @Test(arguments: StoreBackend.available) func aFullRedisAnswers503LosesNothingAndHealsOnceWorkersReturn(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend, privateRedis: true)
        let (store, account) = try await seed(stack)
        try await stack.startIngress()
        let outcome = try await HostileTraffic.fullRedis(stack, store: store, account: account, secret: Self.secret, cards: 300)
        // Only 200 or 503, and Redis did fill; the ingress stayed up.
        #expect(Set(outcome.statuses.keys).isSubset(of: [200, 503]), "\(outcome.statuses)")
        #expect((outcome.statuses[503] ?? 0) > 0, "Redis never filled: \(outcome.statuses)")
        #expect(!outcome.accepted.isEmpty)
        #expect(stack.ingress?.isRunning == true)
        // The workers returned: every action that ever got a 200 is applied, once; nothing dead-lettered.
        #expect(outcome.drained, "\(outcome.appliedCards.count) changes for \(outcome.accepted.count) accepted actions")
        #expect(Set(outcome.appliedCards).count == outcome.appliedCards.count, "a card arrived twice")
        #expect(Set(outcome.appliedCards) == outcome.accepted)
        #expect(outcome.deadLettered == 0)
        // Redis has room again, and the ingress accepts by itself.
        #expect(outcome.healed, "\(outcome.memoryReport)")
        await stack.shutdown()
    }

    // MARK: Slow batches

    @Test(arguments: StoreBackend.available) func aBatchSlowerThanTheClaimTimeoutIsProcessedOnce(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
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
        #expect(try await stack.redis.deadLetterCount(of: .webhooks, keys: stack.keys) == 0)
        await stack.shutdown()
    }
}
