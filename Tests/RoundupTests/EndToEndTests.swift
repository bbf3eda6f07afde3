import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import RoundupCore
import RoundupOps
import RoundupRedis
import RoundupRuntime
import RoundupStore
import RoundupStreams
import RoundupTesting
import Testing

/// The real executables over loopback, with a real redis-server, a real SQLite file and a fake Trello.
@Suite(.serialized) struct EndToEndTests {
    static let secret = "whsec-0123456789abcdef"

    /// An account with a synced list (L1 on board B1), created in the store before the worker starts.
    func seed(_ stack: Stack) async throws -> (store: any ServerStore, account: String) {
        let store = try await stack.store()
        let account = try await store.createAccount(authTokenHash: UUID().uuidString)
        try await store.updateAccountCredentials(id: account, apiKey: "test-api-key", token: "test-token", webhookSecret: Self.secret)
        _ = try await store.createSyncList(accountID: account, name: "Groceries", trelloBoardID: "B1", trelloListID: "L1")
        return (store, account)
    }

    /// What the worker would publish, for tests that run the ingress alone.
    func publish(_ stack: Stack, account: String) async throws {
        _ = try await stack.redis.send("HSET", RedisArgument(stack.keys.webhookSecrets), RedisArgument(account), RedisArgument(Self.secret))
        _ = try await stack.redis.send("SADD", RedisArgument(stack.keys.modelRoute("L1")), RedisArgument(account))
    }

    @Test(arguments: StoreBackend.available) func signedCreateCardBecomesAPendingChange(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        let (store, account) = try await seed(stack)
        stack.trello.setCard(FakeTrello.card(id: "C1", listID: "L1", boardID: "B1", name: "Buy milk", desc: "2 litres"))
        try await stack.startWorker(name: "w1")
        try await stack.startIngress()
        // The worker published the account's secret and routes at start-up.
        #expect(try await stack.redis.send("HGET", RedisArgument(stack.keys.webhookSecrets), RedisArgument(account)).string == Self.secret)
        #expect(try await stack.redis.send("SISMEMBER", RedisArgument(stack.keys.modelRoute("B1")), RedisArgument(account)) == .integer(1))

        // The worker published the account's callback token too: its own URL is the one webhooks are registered at.
        let token = try #require(try await stack.redis.send("HGET", RedisArgument(stack.keys.webhookTokens), RedisArgument(account)).string)
        #expect(try await stack.webhookPath(account: account) == "/dailyroundup/webhook/trello/\(account)/\(token)")
        let body = WebhookBodies.body(type: "createCard", actionID: "A1", cardID: "C1", listID: "L1", boardID: "B1")
        let response = try await stack.postWebhook(path: "/dailyroundup/webhook/trello/\(account)/\(token)", body: body, secret: Self.secret)
        #expect(response.status == .ok)
        let arrived = try await TestSupport.eventually { try await store.pendingChanges(accountID: account, afterID: 0, limit: 10).count == 1 }
        #expect(arrived)
        let change = try #require(try await store.pendingChanges(accountID: account, afterID: 0, limit: 10).first)
        #expect(change.changeType == .create)
        #expect(change.fields["title"] == .string("Buy milk"))
        #expect(change.fields["notes"] == .string("2 litres"))
        #expect(change.trelloActionID == "A1")
        #expect(stack.trello.cardRequests == 1)
        // Acked entries do not pile up in Redis.
        #expect(try await TestSupport.eventually { try await stack.streamLength() == 0 })
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func badRequestsAreRejectedAndNothingIsEnqueued(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        let (_, account) = try await seed(stack)
        try await publish(stack, account: account)
        try await stack.startIngress()
        let path = "/dailyroundup/webhook/trello/\(account)"
        let good = WebhookBodies.body(
            type: "updateCard", actionID: "A2", cardID: "C1", listID: "L1", boardID: "B1", card: ["name": .string("x")], old: ["name": .string("y")])

        #expect(try await stack.request(.HEAD, path, body: nil, headers: [:]).status == .ok)
        #expect(try await stack.request(.HEAD, "/dailyroundup/webhook/trello", body: nil, headers: [:]).status == .ok)
        let wrong = try await stack.postWebhook(path: path, body: good, secret: "not-the-secret")
        #expect(wrong.status == .unauthorized)
        #expect(wrong.body.contains(#""code":"bad_signature""#))
        #expect(try await stack.postWebhook(path: path, body: good, secret: nil).status == .unauthorized)
        // Signed for another callback URL (trailing slash): refused.
        let slash = TrelloSignature.sign(secret: Self.secret, body: good, callbackURL: stack.publicURL + path + "/")
        #expect(try await stack.postWebhook(path: path, body: good, secret: nil, signatureOverride: slash).status == .unauthorized)
        let big = [UInt8](repeating: UInt8(ascii: " "), count: (1 << 20) + 1)
        let tooBig = try await stack.postWebhook(path: path, body: big, secret: Self.secret)
        #expect(tooBig.status == .payloadTooLarge)
        #expect(tooBig.body.contains("payload_too_large"))
        let garbage = try await stack.postWebhook(path: path, body: Array("<html>not json".utf8), secret: Self.secret)
        #expect(garbage.status == .badRequest)
        #expect(garbage.body.contains(#""error":{"code":"invalid_json""#))
        #expect(try await stack.postWebhook(path: path, body: Array(#"{"model":{"id":"L1"}}"#.utf8), secret: Self.secret).status == .badRequest)
        #expect(try await stack.postWebhook(path: "/dailyroundup/webhook/trello/nobody", body: good, secret: Self.secret).status == .notFound)
        #expect(try await stack.request(.GET, path, body: nil, headers: [:]).status == .methodNotAllowed)
        #expect(try await stack.get("/elsewhere").status == .notFound)
        let vote = WebhookBodies.body(type: "voteOnCard", actionID: "A3", cardID: "C1", listID: "L1", boardID: "B1")
        let ignored = try await stack.postWebhook(path: path, body: vote, secret: Self.secret)
        #expect(ignored.status == .ok && ignored.body.contains("ignored"))
        #expect(try await stack.streamLength() == 0)

        // The same request, signed right, is enqueued: the checks above could have failed.
        #expect(try await stack.postWebhook(path: path, body: good, secret: Self.secret).status == .ok)
        #expect(try await stack.streamLength() == 1)
        let metrics = try await stack.get("/metrics").body
        #expect(metrics.contains(#"roundup_webhooks_received_total{result="accepted"} 1"#))
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func redeliveriesAndPerModelDeliveriesMakeOneChange(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        let (store, account) = try await seed(stack)
        stack.trello.setCard(FakeTrello.card(id: "C2", listID: "L1", boardID: "B1", name: "Eggs"))
        try await stack.startWorker(name: "w1")
        try await stack.startIngress()
        let body = WebhookBodies.body(type: "createCard", actionID: "A-dup", cardID: "C2", listID: "L1", boardID: "B1")
        let first = try await stack.postWebhook(path: "/dailyroundup/webhook/trello/\(account)", body: body, secret: Self.secret)
        let second = try await stack.postWebhook(path: "/dailyroundup/webhook/trello/\(account)", body: body, secret: Self.secret)
        // The reference system's path finds the account from model.id.
        let third = try await stack.postWebhook(path: "/dailyroundup/webhook/trello", body: body, secret: Self.secret)
        #expect(first.status == .ok && first.body.contains("accepted"))
        #expect(second.status == .ok && second.body.contains("duplicate"))
        #expect(third.status == .ok && third.body.contains("duplicate"))
        #expect(try await TestSupport.eventually { try await store.pendingChanges(accountID: account, afterID: 0, limit: 10).count == 1 })
        try await Task.sleep(for: .milliseconds(500))
        #expect(try await store.pendingChanges(accountID: account, afterID: 0, limit: 10).count == 1)
        #expect(stack.trello.cardRequests == 1)
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func aWorkerKilledMidBatchLosesNothing(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        let (store, account) = try await seed(stack)
        let count = 120
        for i in 0..<count { stack.trello.setCard(FakeTrello.card(id: "K\(i)", listID: "L1", boardID: "B1", name: "Task \(i)")) }
        stack.trello.setCardDelay(.milliseconds(30))
        try await publish(stack, account: account)
        try await stack.startIngress()
        for i in 0..<count {
            let body = WebhookBodies.body(type: "createCard", actionID: "K-action-\(i)", cardID: "K\(i)", listID: "L1", boardID: "B1")
            #expect(try await stack.postWebhook(path: "/dailyroundup/webhook/trello/\(account)", body: body, secret: Self.secret).status == .ok)
        }
        let fast = ["ROUNDUP_CLAIM_IDLE_MS": "1000", "ROUNDUP_WORKER_BATCH": "40"]
        let doomed = try await stack.startWorker(name: "doomed", extra: fast)
        // Kill it while it holds delivered, unacknowledged entries.
        let holding = try await TestSupport.eventually(timeout: .seconds(20), interval: .milliseconds(5)) {
            return try await stack.redis.pendingCount(of: .webhooks, keys: stack.keys) > 0
        }
        #expect(holding)
        doomed.signal(SIGKILL)
        #expect(await doomed.wait() == 128 + SIGKILL)
        try await stack.startWorker(name: "rescuer", extra: fast)
        let all = try await TestSupport.eventually(timeout: .seconds(30)) {
            try await store.pendingChanges(accountID: account, afterID: 0, limit: 1000).count == count
        }
        #expect(all)
        let changes = try await store.pendingChanges(accountID: account, afterID: 0, limit: 1000)
        #expect(Set(changes.map(\.trelloCardID)).count == count)
        #expect(changes.allSatisfy { $0.changeType == .create })
        #expect(try await TestSupport.eventually { try await stack.streamLength() == 0 })
        #expect(try await stack.redis.pendingCount(of: .webhooks, keys: stack.keys) == 0)
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func redisDownAnswers503ThenRecovers(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend, privateRedis: true)
        let (_, account) = try await seed(stack)
        try await publish(stack, account: account)
        try await stack.startIngress()
        let path = "/dailyroundup/webhook/trello/\(account)"
        func body(_ id: String) -> [UInt8] {
            WebhookBodies.body(
                type: "updateCard", actionID: id, cardID: "C1", listID: "L1", boardID: "B1", card: ["name": .string(id)],
                old: ["name": .string("old")])
        }
        #expect(try await stack.postWebhook(path: path, body: body("R1"), secret: Self.secret).status == .ok)
        await stack.privateRedis!.stop()
        let started = ContinuousClock.now
        let down = try await stack.postWebhook(path: path, body: body("R2"), secret: Self.secret)
        #expect(down.status == .serviceUnavailable)
        #expect(down.body.contains("unavailable"))
        #expect(ContinuousClock.now - started < .seconds(1))
        try await stack.privateRedis!.start()
        try await publish(stack, account: account)  // a restarted, empty Redis is refilled by the worker's start-up
        let back = try await TestSupport.eventually(timeout: .seconds(10)) {
            try await stack.postWebhook(path: path, body: body("R3"), secret: Self.secret).status == .ok
        }
        #expect(back)
        #expect(try await stack.streamLength() == 1)
        #expect(stack.ingress?.isRunning == true)
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func sigtermStopsBothProcessesCleanly(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        let (store, account) = try await seed(stack)
        try await stack.startIngress()
        let worker = try await stack.startWorker(name: "w1")
        stack.trello.setCard(FakeTrello.card(id: "S1", listID: "L1", boardID: "B1", name: "Stop"))
        let body = WebhookBodies.body(type: "createCard", actionID: "S-1", cardID: "S1", listID: "L1", boardID: "B1")
        #expect(try await stack.postWebhook(path: "/dailyroundup/webhook/trello/\(account)", body: body, secret: Self.secret).status == .ok)
        #expect(try await TestSupport.eventually { try await store.pendingChanges(accountID: account, afterID: 0, limit: 10).count == 1 })
        worker.signal(SIGTERM)
        #expect(await worker.wait(timeout: .seconds(15)) == 0)
        stack.ingress!.signal(SIGTERM)
        #expect(await stack.ingress!.wait(timeout: .seconds(15)) == 0)
        await stack.shutdown()
    }

    /// A process still in its start-up (its PostgreSQL not answering, so the migration waits) stops at once and cleanly
    /// on SIGTERM: an operator stopping a process that cannot reach its database gets exit 0, not a failure.
    @Test func sigtermDuringStartUpStopsCleanly() async throws {
        let stack = try await Stack()
        let nobody = "postgres://roundup@127.0.0.1:\(try TestSupport.freePort())/roundup?sslmode=disable"
        for (executable, port) in [("roundup-api", "ROUNDUP_API_PORT"), ("roundup-worker", "ROUNDUP_WORKER_PORT")] {
            let process = try ManagedProcess(
                name: "\(executable)-startup", executable: TestSupport.binDirectory.appendingPathComponent(executable),
                environment: stack.environment.merging(["ROUNDUP_DATABASE_URL": nobody, port: "\(try TestSupport.freePort())"]) { _, new in new },
                logDirectory: stack.directory)
            try await Task.sleep(for: .seconds(1))
            #expect(process.isRunning, "\(executable) ended before the signal: \(process.output)")
            process.signal(SIGTERM)
            #expect(await process.wait(timeout: .seconds(10)) == 0, "\(executable): \(process.output)")
        }
        await stack.shutdown()
    }
}

@Suite(.serialized) struct DeadLetterTests {
    /// One createCard whose card fetch keeps failing with `status`, delivered through the ingress to a worker that
    /// gives up after two deliveries; returns once it is in the dead-letter stream.
    static func deadLetterOne(_ stack: Stack, card: String, action: String, status: Int) async throws -> (store: any ServerStore, account: String) {
        let e2e = EndToEndTests()
        let (store, account) = try await e2e.seed(stack)
        try await e2e.publish(stack, account: account)
        stack.trello.setCard(FakeTrello.card(id: card, listID: "L1", boardID: "B1", name: "Failing"))
        stack.trello.failNextCardRequests(status: status, count: 1_000)
        try await stack.startIngress()
        try await stack.startWorker(name: "w1", extra: ["ROUNDUP_MAX_DELIVERIES": "2", "ROUNDUP_CLAIM_IDLE_MS": "300"])
        let body = WebhookBodies.body(type: "createCard", actionID: action, cardID: card, listID: "L1", boardID: "B1")
        #expect(try await stack.postWebhook(path: "/dailyroundup/webhook/trello/\(account)", body: body, secret: EndToEndTests.secret).status == .ok)
        let dead = try await TestSupport.eventually(timeout: .seconds(30)) {
            try await stack.redis.deadLetterCount(of: .webhooks, keys: stack.keys) == 1
        }
        #expect(dead)
        return (store, account)
    }

    @Test(arguments: StoreBackend.available) func anEventThatKeepsFailingIsDeadLetteredWithItsError(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        let (store, account) = try await Self.deadLetterOne(stack, card: "D1", action: "D-1", status: 503)
        let entries = try await stack.redis.send("XRANGE", RedisArgument(stack.keys.deadLetterStream(WebhookShard(account: account))), "-", "+")
        let fields = entries.array?.first?.array?[1].array?.compactMap(\.string) ?? []
        let error = fields.firstIndex(of: "error").map { fields[$0 + 1] } ?? ""
        #expect(error.contains("503"))
        #expect(fields.contains("D-1"))  // the original event travels with it
        // Both deliveries' attempts travel with it too (when, by which worker, with what), and leave the errors hash.
        let letter = try #require(try await DeadLetterQueue(redis: stack.redis, keys: stack.keys).page(limit: 10).letters.first)
        #expect(letter.letter.attempts.count == 2, "\(letter.letter.attempts)")
        #expect(letter.letter.attempts.allSatisfy { $0.consumer.contains("w1") && $0.error.contains("503") }, "\(letter.letter.attempts)")
        let now = Int(Date().timeIntervalSince1970 * 1000)
        #expect(letter.letter.attempts.allSatisfy { now - 60_000 < $0.at && $0.at <= now })
        let errors = stack.keys.webhookErrors(WebhookShard(account: account))
        #expect(try await stack.redis.send("HLEN", RedisArgument(errors)).int == 0)
        #expect(try await stack.streamLength() == 0)
        #expect(try await store.pendingChanges(accountID: account, afterID: 0, limit: 10).isEmpty)
        await stack.shutdown()
    }
}

/// A TCP server that accepts connections and never answers: Redis behind a network partition.
final class BlackHoleServer: Sendable {
    final class Swallow: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {}
    }

    let channel: any Channel
    var port: Int { channel.localAddress?.port ?? 0 }

    init() async throws {
        channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(Swallow()) }
            }
            .bind(host: "127.0.0.1", port: 0).get()
    }

    func stop() async { try? await channel.close().get() }
}

@Suite(.serialized) struct HungRedisTests {
    @Test func aRedisThatNeverAnswersGets503WithinASecond() async throws {
        let stack = try await Stack()
        let hole = try await BlackHoleServer()
        try await stack.startIngress(extra: ["ROUNDUP_REDIS_URL": "redis://127.0.0.1:\(hole.port)/0"])
        let body = WebhookBodies.body(type: "createCard", actionID: "H-1", cardID: "H1", listID: "L1", boardID: "B1")
        for attempt in 1...3 {
            let started = ContinuousClock.now
            let response = try await stack.postWebhook(
                path: "/dailyroundup/webhook/trello/00000000-0000-4000-8000-000000000000", body: body, secret: "s")
            let elapsed = ContinuousClock.now - started
            #expect(response.status == .serviceUnavailable, "attempt \(attempt): \(response.status) \(response.body)")
            #expect(response.body.contains(#""code":"unavailable""#))
            // The Redis command timeout (800 ms) or, failing that, the answer deadline (950 ms) answers first.
            #expect(elapsed < .seconds(1), "attempt \(attempt) took \(elapsed)")
        }
        #expect(try await stack.get("/readyz").status == .serviceUnavailable)
        #expect(stack.ingress?.isRunning == true)
        await hole.stop()
        await stack.shutdown()
    }
}
