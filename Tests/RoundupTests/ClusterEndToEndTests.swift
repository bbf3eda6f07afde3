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

/// The real ingress and workers on a real Redis Cluster of three primaries and three replicas: webhooks of many
/// accounts go to their shards across the primaries and become exactly one change each; a failing event is
/// dead-lettered beside its shard and replayed; no command is refused with CROSSSLOT.
@Suite(.serialized) struct ClusterEndToEndTests {
    static let secret = "whsec-cluster-0123456789"
    /// A failing event is dead-lettered after its second delivery, an entry of a stopped worker claimed after 500 ms.
    static let worker = ["ROUNDUP_CLAIM_IDLE_MS": "500", "ROUNDUP_MAX_DELIVERIES": "2"]

    @Test func webhooksOfManyAccountsBecomeOneChangeEachAcrossTheShards() async throws {
        let cluster = try await RedisCluster()
        let stack = try await Stack(store: .sqlite, cluster: cluster)
        let store = try await stack.store()
        var accounts: [String] = []
        for n in 0..<12 {
            let account = try await store.createAccount(authTokenHash: UUID().uuidString)
            try await store.updateAccountCredentials(id: account, apiKey: "test-api-key", token: "test-token", webhookSecret: Self.secret)
            _ = try await store.createSyncList(accountID: account, name: "List \(n)", trelloBoardID: "B\(n)", trelloListID: "L\(n)")
            accounts.append(account)
        }
        let shards = Set(accounts.map { WebhookShard(account: $0) })
        let topology = try #require(try await stack.redis.clusterTopology())
        let primaries = Set(shards.compactMap { topology.shard(serving: RedisHashSlot(key: stack.keys.webhookStream($0)))?.primary })
        #expect(primaries.count > 1, "the accounts' shards live on several primaries")

        try await stack.startWorker(name: "w1", extra: Self.worker)
        try await stack.startWorker(name: "w2", extra: Self.worker)
        try await stack.startIngress()
        var expected: [String: [String]] = [:]
        for (n, account) in accounts.enumerated() {
            let path = try await stack.webhookPath(account: account)
            for c in 0..<5 {
                let card = "C\(n)-\(c)"
                stack.trello.setCard(FakeTrello.card(id: card, listID: "L\(n)", boardID: "B\(n)", name: "Card \(card)"))
                let body = WebhookBodies.body(type: "createCard", actionID: "A\(n)-\(c)", cardID: card, listID: "L\(n)", boardID: "B\(n)")
                let response = try await stack.postWebhook(path: path, body: body, secret: Self.secret)
                #expect(response.status == .ok, "\(response.body)")
                // A redelivery is answered 200 and enqueued once (its dedupe mark is in its shard's slot).
                if c == 0 { #expect(try await stack.postWebhook(path: path, body: body, secret: Self.secret).status == .ok) }
                expected[account, default: []].append(card)
            }
        }
        let all = await TestSupport.eventually(timeout: .seconds(60)) {
            for account in accounts {
                guard (try? await store.pendingChanges(accountID: account, afterID: 0, limit: 100).count) == 5 else { return false }
            }
            return true
        }
        #expect(all, "\(stack.allLogs.suffix(3000))")
        for account in accounts {
            let changes = try await store.pendingChanges(accountID: account, afterID: 0, limit: 100)
            #expect(changes.map(\.trelloCardID).sorted() == expected[account]?.sorted())
        }
        #expect(try await TestSupport.eventually { try await stack.streamLength() == 0 })
        #expect(try await stack.redis.pendingCount(of: .webhooks, keys: stack.keys) == 0)
        // The operators' view sums the shards.
        let report = try await QueueInspector.report(.webhooks, redis: stack.redis, keys: stack.keys, perShard: true)
        #expect(report.length == 0 && report.pending == 0 && report.shards.count == WebhookShard.count)
        #expect(Set(report.consumers.map(\.name)).isSuperset(of: ["w1", "w2"]) || report.consumers.count >= 2, "\(report.consumers)")

        // A card Trello keeps failing: dead-lettered in its account's shard, shown, replayed once Trello is back.
        let account = accounts[3]
        stack.trello.setCard(FakeTrello.card(id: "DL", listID: "L3", boardID: "B3", name: "Fails"))
        stack.trello.failNextCardRequests(status: 500, count: 1000)
        let body = WebhookBodies.body(type: "createCard", actionID: "A-DL", cardID: "DL", listID: "L3", boardID: "B3")
        #expect(try await stack.postWebhook(path: try await stack.webhookPath(account: account), body: body, secret: Self.secret).status == .ok)
        let queue = DeadLetterQueue(redis: stack.redis, keys: stack.keys)
        #expect(await TestSupport.eventually(timeout: .seconds(120)) { (try? await queue.count()) == 1 }, "\(stack.allLogs.suffix(2000))")
        let letter = try #require(try await queue.page(limit: 10).letters.first)
        #expect(letter.id.hasPrefix("\(WebhookShard(account: account).index):") && letter.account == account)
        stack.trello.failNextCardRequests(status: 500, count: 0)
        #expect(try await queue.replay(ids: [letter.id]) == 1)
        #expect(
            await TestSupport.eventually(timeout: .seconds(30)) {
                (try? await store.pendingChanges(accountID: account, afterID: 0, limit: 100).count) == 6
            })

        let logs = stack.allLogs
        #expect(
            !logs.contains("CROSSSLOT"),
            "a command named keys of several slots: \(logs.components(separatedBy: "\n").filter { $0.contains("CROSSSLOT") }.prefix(3))")
        await stack.shutdown()
        await cluster.stop()
    }
}
