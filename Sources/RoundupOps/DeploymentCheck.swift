import Foundation
import NIOCore
import RoundupCore
import RoundupDatabase
import RoundupPush
public import RoundupRedis
public import RoundupRuntime
import RoundupStore
import RoundupStreams

/// `roundupctl check`: Redis and the store reached, stored credentials that look right, the configuration the
/// processes need. What passed, and every problem (the command exits 1 when there is one).
public struct DeploymentCheck: Sendable {
    public var passed: [String] = []
    public var problems: [String] = []

    public var ok: Bool { problems.isEmpty }

    public static func run(configuration: RoundupConfiguration, redis: RedisClient) async -> DeploymentCheck {
        var check = DeploymentCheck()
        do {
            _ = try await redis.send(RedisCommand("PING"), timeout: .seconds(2))
            check.passed.append("redis \(try RedisConfiguration(configuration).endpoint)")
        } catch {
            check.problems.append("redis: \(error)")
        }
        if redis.isCluster { await check.cluster(redis) }
        do {
            check.problems += try await Stores.withStore(configuration: configuration) { store in
                try await store.ping()
                return storedCredentialProblems(try await store.allAccounts())
            }
            check.passed.append("store \(configuration.postgresURL?.masked ?? configuration.databaseURL)")
        } catch {
            check.problems.append("store: \(error)")
        }
        if configuration.publicURL == nil { check.problems.append("ROUNDUP_PUBLIC_URL is not set (the ingress and the API need it)") }
        let apns = apnsProblems(configuration)
        check.problems += apns
        if configuration.missingAPNsKeys.isEmpty, apns.isEmpty {
            check.passed.append(
                "apns key \(configuration.apnsKeyID ?? "") (team \(configuration.apnsTeamID ?? ""), topic \(configuration.apnsTopic ?? ""))")
        }
        return check
    }

    /// A Redis Cluster's state as every primary sees it (`cluster_state:ok`), its slots all served, each primary's
    /// replicas (an accepted webhook waits for one: a primary without any has no copy to fail over to), and where the
    /// webhook shards live.
    mutating func cluster(_ redis: RedisClient) async {
        do {
            guard let topology = try await redis.clusterTopology(refresh: true) else { return }
            if topology.coveredSlots < RedisHashSlot.count {
                problems.append("redis cluster: \(RedisHashSlot.count - topology.coveredSlots) of 16384 slots have no primary")
            }
            for (node, reply) in try await redis.onEveryPrimary(RedisCommand("CLUSTER", ["INFO"]), timeout: .seconds(2)) {
                let state = reply.string?.split(whereSeparator: \.isNewline).first { $0.hasPrefix("cluster_state:") }
                if state != "cluster_state:ok" { problems.append("redis cluster: \(node) reports \(state ?? "no cluster_state")") }
            }
            for shard in topology.shards where shard.replicas.isEmpty {
                problems.append("redis cluster: primary \(shard.primary) has no healthy replica (a failover would lose what it holds)")
            }
            var perPrimary: [RedisNodeAddress: Int] = [:]
            for shard in WebhookShard.all {
                if let owner = topology.shard(serving: RedisHashSlot(key: shard.tag)) { perPrimary[owner.primary, default: 0] += 1 }
            }
            let spread = topology.shards.map {
                "\($0.primary) \($0.slots.reduce(0) { $0 + $1.count }) slots, \(perPrimary[$0.primary] ?? 0) webhook shards, \($0.replicas.count) replica(s)"
            }
            passed.append("redis cluster: \(topology.coveredSlots) of 16384 slots served; " + spread.joined(separator: "; "))
        } catch {
            problems.append("redis cluster: \(error)")
        }
    }

    /// Accounts whose Trello key does not look like one, or that sync lists without a token or webhook secret.
    static func storedCredentialProblems(_ accounts: [(details: AccountDetails, lists: Int, pendingChanges: Int)]) -> [String] {
        var problems: [String] = []
        for account in accounts {
            let d = account.details
            if let key = d.trelloAPIKey, !(key.count == 32 && key.allSatisfy(\.isHexDigit)) {
                problems.append("account \(d.id): trello_api_key is not 32 hex characters")
            }
            if account.lists > 0, d.trelloToken == nil || d.trelloWebhookSecret == nil {
                problems.append("account \(d.id): syncs lists but lacks trello_token or trello_webhook_secret")
            }
        }
        return problems
    }

    /// APNs credentials as roundup-pusher needs them (only checked when any of them is set).
    public static func apnsProblems(_ c: RoundupConfiguration) -> [String] {
        let given = [c.apnsKeyFile, c.apnsKeyID, c.apnsTeamID, c.apnsTopic].compactMap { $0 }
        guard !given.isEmpty else { return [] }
        var problems = c.missingAPNsKeys.map { "\($0) is not set (roundup-pusher needs it)" }
        if let file = c.apnsKeyFile {
            do {
                _ = try APNsTokenProvider(keyFile: file, keyID: c.apnsKeyID ?? "", teamID: c.apnsTeamID ?? "")
            } catch {
                problems.append("ROUNDUP_APNS_KEY_FILE \(file) is not a P-256 .p8 key: \(error)")
            }
        }
        for (name, value) in [("ROUNDUP_APNS_KEY_ID", c.apnsKeyID), ("ROUNDUP_APNS_TEAM_ID", c.apnsTeamID)] {
            if let value, !(value.count == 10 && value.allSatisfy { $0.isLetter || $0.isNumber }) {
                problems.append("\(name) should be Apple's 10-character identifier")
            }
        }
        return problems
    }
}
