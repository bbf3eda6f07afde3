import Foundation
import NIOCore
import NIOHTTP1
import RoundupCore
import RoundupOps
import RoundupRedis
import RoundupRuntime
import RoundupStore
import RoundupStreams
import RoundupTesting
import Testing

/// An upgrade onto the key layout for slots, on a standalone Redis holding the keys of before: the webhook stream's
/// events (one of them delivered and never acknowledged, as a worker stopped mid-batch leaves it), its dead letters,
/// the job stream with its group, the routing tables. The new worker applies every old event once, moves the dead
/// letters to their accounts' shards, renames the job stream with its group, and republishes the routes.
@Suite(.serialized) struct LegacyKeysTests {
    @Test func aWorkerOfTheNewLayoutTakesOverTheKeysOfBefore() async throws {
        // A standalone Redis of its own: a cluster never held these keys.
        let stack = try await Stack(store: .sqlite, privateRedis: true)
        let store = try await stack.store()
        let account = try await store.createAccount(authTokenHash: UUID().uuidString)
        try await store.updateAccountCredentials(id: account, apiKey: "test-api-key", token: "test-token", webhookSecret: "whsec-legacy-01234")
        _ = try await store.createSyncList(accountID: account, name: "Groceries", trelloBoardID: "B1", trelloListID: "L1")
        let p = stack.prefix
        let old = RedisArgument(p + "stream:webhooks")
        _ = try await stack.redis.send("XGROUP", "CREATE", old, "workers", "0", "MKSTREAM")
        for n in 1...3 {
            stack.trello.setCard(FakeTrello.card(id: "C\(n)", listID: "L1", boardID: "B1", name: "Card \(n)"))
            let body = WebhookBodies.body(type: "createCard", actionID: "A\(n)", cardID: "C\(n)", listID: "L1", boardID: "B1")
            _ = try await stack.redis.send(
                "XADD", old, "*", "account", RedisArgument(account), "action", RedisArgument("A\(n)"), "type", "createCard", "model", "L1",
                "received", RedisArgument(Int(Date().timeIntervalSince1970 * 1000)), "body", RedisArgument(bytes: body))
        }
        // The first was delivered to a worker of the old version that stopped before acknowledging it.
        _ = try await stack.redis.send("XREADGROUP", "GROUP", "workers", "old-worker", "COUNT", "1", "STREAMS", old, ">")
        _ = try await stack.redis.send(
            "XADD", RedisArgument(p + "stream:webhooks:dead"), "*", "account", RedisArgument(account), "action", "A-dead", "type", "createCard",
            "body", "{}", "error", "trello_transient\tthe old dead letter", "deliveries", "5")
        _ = try await stack.redis.send("XGROUP", "CREATE", RedisArgument(p + "stream:jobs"), "workers", "0", "MKSTREAM")
        _ = try await stack.redis.send("HSET", RedisArgument(p + "webhook-secrets"), RedisArgument(account), "stale")
        _ = try await stack.redis.send("SADD", RedisArgument(p + "route:L1"), RedisArgument(account))

        try await stack.startWorker(name: "w1", extra: ["ROUNDUP_CLAIM_IDLE_MS": "500", "ROUNDUP_RECONCILE_INTERVAL_SECONDS": "0"])
        let applied = await TestSupport.eventually(timeout: .seconds(30)) {
            (try? await store.pendingChanges(accountID: account, afterID: 0, limit: 10).count) == 3
        }
        #expect(applied, "\(stack.allLogs.suffix(2000))")
        let changes = try await store.pendingChanges(accountID: account, afterID: 0, limit: 10)
        // (C1, held by the stopped worker, is claimed once idle: after the others, as any stopped worker's entries are.)
        #expect(Set(changes.map(\.trelloCardID)) == ["C1", "C2", "C3"] && changes.allSatisfy { $0.changeType == .create })
        // Drained, then removed; the worker reads the shards from then on.
        #expect(await TestSupport.eventually { (try? await stack.redis.send("EXISTS", old).int) == 0 })
        // The dead letter is in the account's shard, where the tools see it.
        let queue = DeadLetterQueue(redis: stack.redis, keys: stack.keys)
        let letters = try await queue.page(limit: 10).letters
        #expect(letters.count == 1 && letters.first?.account == account && letters.first?.letter.error?.contains("the old dead letter") == true)
        #expect(letters.first?.id.hasPrefix("\(WebhookShard(account: account).index):") == true)
        #expect(try await stack.redis.send("EXISTS", RedisArgument(p + "stream:webhooks:dead")).int == 0)
        // The job stream under its slot's name, its group kept.
        #expect(try await stack.redis.send("EXISTS", RedisArgument(p + "stream:jobs")).int == 0)
        let groups = try await stack.redis.send("XINFO", "GROUPS", RedisArgument(stack.keys.jobStream))
        #expect(groups.array?.contains { $0.fieldMap["name"]?.string == "workers" } == true)
        // The routing tables of before are gone; the worker published them anew.
        #expect(try await stack.redis.send("EXISTS", RedisArgument(p + "webhook-secrets"), RedisArgument(p + "route:L1")).int == 0)
        #expect(
            try await stack.redis.send("HGET", RedisArgument(stack.keys.webhookSecrets), RedisArgument(account)).string == "whsec-legacy-01234")
        // A new webhook goes to the account's shard and is applied.
        stack.trello.setCard(FakeTrello.card(id: "C4", listID: "L1", boardID: "B1", name: "Card 4"))
        try await stack.startIngress()
        let body = WebhookBodies.body(type: "createCard", actionID: "A4", cardID: "C4", listID: "L1", boardID: "B1")
        #expect(
            try await stack.postWebhook(path: try await stack.webhookPath(account: account), body: body, secret: "whsec-legacy-01234").status == .ok)
        #expect(await TestSupport.eventually { (try? await store.pendingChanges(accountID: account, afterID: 0, limit: 10).count) == 4 })
        await stack.shutdown()
    }
}
