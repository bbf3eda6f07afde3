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

/// Webhooks under load while the cluster changes under them: a primary killed while its replica lags behind (the
/// replica is stopped for a moment first, so it lacks the last writes), a slot of a webhook shard migrated live. A
/// sender per account plays Trello: it sends the account's actions one after another and retries one until it is
/// answered 200. Every answer is 200 or 503; every action answered 200 becomes exactly one change, in the account's
/// order; the system serves again by itself. Without `WAIT` the same failover loses accepted actions: the test of
/// the guard fails when the guard is off.
@Suite(.serialized) struct ClusterFailoverTests {
    static let secret = "whsec-failover-0123456789"
    /// No periodic reconciliation: it would create cards it finds in Trello in its own order, before their webhooks.
    static let worker = ["ROUNDUP_CLAIM_IDLE_MS": "1000", "ROUNDUP_RECONCILE_INTERVAL_SECONDS": "0", "LOG_LEVEL": "warning"]
    static let perAccount = 36

    struct Load {
        var accepted: [String: [String]] = [:]
        var statuses: [UInt: Int] = [:]
        var failures = 0
    }

    /// Accounts whose shards are spread over the primaries, `victim`'s included, each with its list.
    static func accounts(_ stack: Stack, count: Int) async throws -> [String] {
        let store = try await stack.store()
        var accounts: [String] = []
        for n in 0..<count {
            let account = try await store.createAccount(authTokenHash: UUID().uuidString)
            try await store.updateAccountCredentials(id: account, apiKey: "test-api-key", token: "test-token", webhookSecret: Self.secret)
            _ = try await store.createSyncList(accountID: account, name: "List \(n)", trelloBoardID: "B\(n)", trelloListID: "L\(n)")
            accounts.append(account)
        }
        return accounts
    }

    /// Each account's sender: `perAccount` actions, one after another (`gap` apart), each retried (after 100 ms) until
    /// answered 200.
    static func send(
        _ stack: Stack, accounts: [String], perAccount: Int, gap: Duration = .milliseconds(20), until deadline: ContinuousClock.Instant
    ) async throws -> Load {
        var paths: [String: String] = [:]
        for account in accounts { paths[account] = try await stack.webhookPath(account: account) }
        return await withTaskGroup(of: (String, [String], [UInt: Int], Int).self) { group in
            for (n, account) in accounts.enumerated() {
                let path = paths[account]!
                group.addTask {
                    var done: [String] = []
                    var statuses: [UInt: Int] = [:]
                    var failures = 0
                    for c in 0..<perAccount {
                        let card = "C\(n)-\(c)"
                        stack.trello.setCard(FakeTrello.card(id: card, listID: "L\(n)", boardID: "B\(n)", name: "Card \(card)"))
                        let body = WebhookBodies.body(type: "createCard", actionID: "A\(n)-\(c)", cardID: card, listID: "L\(n)", boardID: "B\(n)")
                        while ContinuousClock.now < deadline {
                            do {
                                let status = try await stack.postWebhook(path: path, body: body, secret: Self.secret).status
                                statuses[status.code, default: 0] += 1
                                if status == .ok {
                                    done.append(card)
                                    break
                                }
                            } catch {
                                failures += 1
                            }
                            try? await Task.sleep(for: .milliseconds(100))
                        }
                        try? await Task.sleep(for: gap)
                    }
                    return (account, done, statuses, failures)
                }
            }
            var load = Load()
            for await (account, done, statuses, failures) in group {
                load.accepted[account] = done
                for (code, count) in statuses { load.statuses[code, default: 0] += count }
                load.failures += failures
            }
            return load
        }
    }

    /// Only 200 or 503 was answered; every action was answered 200 in the end and became exactly one change, in the
    /// order its account sent them.
    static func expectEveryActionOnceInOrder(_ sent: Load, applied: [String: [String]]) {
        #expect(Set(sent.statuses.keys).isSubset(of: [200, 503]), "answers: \(sent.statuses)")
        for (account, accepted) in sent.accepted {
            #expect(accepted.count == perAccount, "every action of \(account) was answered 200 in the end")
            #expect(applied[account] == accepted, "\(account): applied \(applied[account] ?? []) for \(accepted)")
        }
    }

    /// Once every shard is drained (nothing waits, nothing pending), what the store holds for each account.
    static func drainedThenApplied(_ stack: Stack, accounts: [String]) async throws -> [String: [String]] {
        let drained = await TestSupport.eventually(timeout: .seconds(60)) {
            guard (try? await stack.streamLength()) == 0 else { return false }
            return (try? await stack.redis.pendingCount(of: .webhooks, keys: stack.keys)) == 0
        }
        #expect(drained)
        try await Task.sleep(for: .seconds(1))  // anything applied twice would show by now
        return try await applied(stack, accounts: accounts)
    }

    /// What the store holds for each account: its cards in the order their changes were made.
    static func applied(_ stack: Stack, accounts: [String]) async throws -> [String: [String]] {
        let store = try await stack.store()
        var applied: [String: [String]] = [:]
        for account in accounts {
            applied[account] = try await store.pendingChanges(accountID: account, afterID: 0, limit: 10_000).map(\.trelloCardID)
        }
        return applied
    }

    /// The failover: the replica of a primary serving some of the accounts' shards is stopped and cut off (its primary
    /// goes on taking writes it will never have), the primary is killed, the replica goes on and is promoted.
    func failover(waitForReplicas: Bool) async throws -> (load: Load, applied: [String: [String]], victimAccounts: Set<String>) {
        let cluster = try await RedisCluster()
        let stack = try await Stack(store: .sqlite, cluster: cluster)
        let accounts = try await Self.accounts(stack, count: 24)
        let topology = try #require(try await stack.redis.clusterTopology())
        let owner = { (account: String) in topology.shard(serving: RedisHashSlot(key: stack.keys.webhookStream(WebhookShard(account: account)))) }
        let victim = try #require(owner(accounts[0]))
        let replica = try #require(victim.replicas.first)
        let victimAccounts = Set(accounts.filter { owner($0)?.primary == victim.primary })

        // One worker: it applies an account's entries in the order they were accepted (two workers' batches may
        // interleave, where each card's own order still holds by its actions' dates). Without the guard it is stopped
        // (SIGSTOP) through the failover: entries it had read would be applied from its memory (a worker keeps a
        // throttled account's entries until their turn), and what the failover loses is what only Redis held.
        let worker = try await stack.startWorker(name: "w1", extra: Self.worker)
        try await stack.startIngress(extra: waitForReplicas ? [:] : ["ROUNDUP_REDIS_WAIT_REPLICAS": "0"])
        // The ingress has learnt that the primaries have replicas: an action goes through.
        let warm = try await Self.send(stack, accounts: [accounts[0]], perAccount: 1, until: .now + .seconds(20))
        #expect(warm.accepted[accounts[0]]?.count == 1)

        if !waitForReplicas { worker.signal(SIGSTOP) }
        let deadline = ContinuousClock.now + .seconds(90)
        // About six seconds of steady load; the failover begins two seconds in.
        let load = Task { try await Self.send(stack, accounts: accounts, perAccount: Self.perAccount, gap: .milliseconds(150), until: deadline) }
        try await Task.sleep(for: .milliseconds(700))
        // The replica hangs for a moment (less than the node timeout: the cluster does not fail it) and loses its
        // replication link (the primary drops it, as a network would): its primary goes on answering writes the replica
        // will never have.
        cluster.signal(replica.port, SIGSTOP)
        try await cluster.send(victim.primary.port, "CLIENT", "KILL", "TYPE", "replica")
        try await Task.sleep(for: .milliseconds(1500))
        await cluster.crash(victim.primary.port)
        cluster.signal(replica.port, SIGCONT)
        let sent = try await load.value
        if !waitForReplicas { worker.signal(SIGCONT) }
        // The system serves again by itself: every sender got through with every action.
        try await cluster.waitUntilHealthyOrDegraded()
        let applied = try await Self.drainedThenApplied(stack, accounts: accounts)
        let logs = stack.allLogs
        #expect(!logs.contains("CROSSSLOT"))
        await stack.shutdown()
        await cluster.stop()
        return (sent, applied, victimAccounts)
    }

    @Test func aPrimaryKilledWhileItsReplicaLagsLosesNothingAnswered200() async throws {
        let (load, applied, victimAccounts) = try await failover(waitForReplicas: true)
        print("with WAIT: answers \(load.statuses), \(victimAccounts.count) accounts on the killed primary's shards")
        #expect(!victimAccounts.isEmpty)
        #expect((load.statuses[503] ?? 0) > 0, "the failover was felt: \(load.statuses)")
        Self.expectEveryActionOnceInOrder(load, applied: applied)
    }

    /// A webhook shard's slot moved to another primary while its accounts send: half its keys (the stream, its
    /// dedupe marks) on the new primary for a second, the rest still on the old one (`ASK`, `TRYAGAIN`), then all
    /// there (`MOVED`).
    @Test func aShardsSlotMovedLiveLosesNothingAndKeepsTheOrder() async throws {
        let cluster = try await RedisCluster()
        let stack = try await Stack(store: .sqlite, cluster: cluster)
        let accounts = try await Self.accounts(stack, count: 24)
        try await stack.startWorker(name: "w1", extra: Self.worker)
        try await stack.startIngress()
        let topology = try #require(try await stack.redis.clusterTopology())
        // The shard with the most of these accounts.
        let counts = Dictionary(grouping: accounts, by: { WebhookShard(account: $0) }).mapValues(\.count)
        let shard = try #require(counts.max { $0.value < $1.value }?.key)
        let slot = RedisHashSlot(key: stack.keys.webhookStream(shard))
        let source = try #require(topology.shard(serving: slot)?.primary)
        let target = try #require(topology.shards.map(\.primary).first { $0 != source })
        let movingAccounts = accounts.filter { WebhookShard(account: $0) == shard }

        let deadline = ContinuousClock.now + .seconds(90)
        let load = Task { try await Self.send(stack, accounts: accounts, perAccount: Self.perAccount, gap: .milliseconds(150), until: deadline) }
        try await Task.sleep(for: .seconds(2))
        try await cluster.migrate(slot: slot, to: target.port, pause: .seconds(1), keysFirst: 10)
        let sent = try await load.value
        let applied = try await Self.drainedThenApplied(stack, accounts: accounts)
        print("slot \(slot) of shard \(shard) (\(movingAccounts.count) accounts) moved \(source) → \(target); answers \(sent.statuses)")
        #expect(try await stack.redis.clusterTopology(refresh: true)?.shard(serving: slot)?.primary == target)
        Self.expectEveryActionOnceInOrder(sent, applied: applied)
        #expect(!stack.allLogs.contains("CROSSSLOT"))
        await stack.shutdown()
        await cluster.stop()
    }

    /// A replica stopped under load and started again: while the cluster still counts it, its primary's events are
    /// answered 503 (`WAIT` gets no acknowledgement); once it is marked failed the ingress stops waiting for it; when it
    /// is back it catches up. Nothing answered 200 is lost, nothing is applied twice, the order holds.
    @Test func aReplicaStoppedAndStartedUnderLoadLosesNothing() async throws {
        let cluster = try await RedisCluster()
        let stack = try await Stack(store: .sqlite, cluster: cluster)
        let accounts = try await Self.accounts(stack, count: 24)
        try await stack.startWorker(name: "w1", extra: Self.worker)
        try await stack.startIngress()
        let topology = try #require(try await stack.redis.clusterTopology())
        let primary = try #require(topology.shard(serving: RedisHashSlot(key: stack.keys.webhookStream(WebhookShard(account: accounts[0])))))
        let replica = try #require(primary.replicas.first)
        let deadline = ContinuousClock.now + .seconds(90)
        let load = Task { try await Self.send(stack, accounts: accounts, perAccount: Self.perAccount, gap: .milliseconds(150), until: deadline) }
        try await Task.sleep(for: .milliseconds(1500))
        await cluster.crash(replica.port)
        try await Task.sleep(for: .seconds(4))
        try await cluster.restart(replica.port)
        let sent = try await load.value
        try await cluster.waitUntilHealthy()
        let applied = try await Self.drainedThenApplied(stack, accounts: accounts)
        print("replica \(replica) of \(primary.primary) stopped and started: answers \(sent.statuses)")
        Self.expectEveryActionOnceInOrder(sent, applied: applied)
        // The primary has its replica again, and the ingress waits for it again once it has learnt so.
        #expect(
            try await stack.redis.clusterTopology(refresh: true)?.shard(
                serving: RedisHashSlot(key: stack.keys.webhookStream(WebhookShard(account: accounts[0]))))?.replicas.count == 1)
        #expect(!stack.allLogs.contains("CROSSSLOT"))
        await stack.shutdown()
        await cluster.stop()
    }

    /// The same failover with the guard off (`ROUNDUP_REDIS_WAIT_REPLICAS=0`): actions answered 200 while the replica
    /// lagged are gone with the primary.
    @Test func withoutWaitTheSameFailoverLosesAcceptedActions() async throws {
        let (load, applied, victimAccounts) = try await failover(waitForReplicas: false)
        var lost = 0
        for (account, accepted) in load.accepted {
            let have = Set(applied[account] ?? [])
            lost += accepted.filter { !have.contains($0) }.count
        }
        let lostOnVictim = load.accepted.filter { victimAccounts.contains($0.key) }.reduce(0) { total, entry in
            total + entry.value.filter { !(applied[entry.key] ?? []).contains($0) }.count
        }
        print("without WAIT: \(lost) accepted actions lost (\(lostOnVictim) on the killed primary's shards); answers \(load.statuses)")
        #expect(lost > 0 && lost == lostOnVictim, "the failover lost accepted actions, all of them on the killed primary's shards")
    }
}

extension RedisCluster {
    /// Every slot served again (a killed node may stay down: its replica took over).
    func waitUntilHealthyOrDegraded(timeout: Duration = .seconds(60)) async throws {
        let client = RedisClient(configuration: try configuration(poolSize: 1))
        defer { Task { await client.shutdown() } }
        let served = await TestSupport.eventually(timeout: timeout, interval: .milliseconds(200)) {
            (try? await client.clusterTopology(refresh: true))?.coveredSlots == RedisHashSlot.count
        }
        if !served { throw RedisClientError(.timeout, "the cluster did not serve every slot again within \(timeout)") }
    }
}
