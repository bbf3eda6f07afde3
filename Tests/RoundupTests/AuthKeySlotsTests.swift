import Foundation
import NIOCore
import NIOHTTP1
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStreams
import RoundupTesting
import Testing

@testable import RoundupAPI

/// Where the API's per-request keys live: an account's request counts and token epoch in the
/// account's own slot (`{a:<account>}`), so the requests of a cluster's accounts spread over its primaries instead of
/// all running their script on the one serving `{auth}`; the throttle of client addresses, asked only for tokens no
/// process keeps, stays in `{auth}`. Every script names keys of one slot.
@Suite struct AuthKeySlotsTests {
    static let bootstrap = "bootstrap-0123456789abcdef"

    @Test func anAccountsAuthKeysAreInItsOwnSlotAndEachScriptInOne() {
        let keys = RedisKeys(prefix: "p:")
        let account = "0b6e2a4c-1f3d-4e5a-9b8c-7d6e5f4a3b2c"
        let own = RedisHashSlot(key: keys.streamingDevices(account: account))
        #expect(keys.authEpoch(account: account) == "p:auth:{a:\(account)}:epoch")
        #expect(keys.requestCount(account: account, minute: 29_000_000) == "p:auth:{a:\(account)}:ratelimit:29000000")
        // The rate limit's script for a kept token (KEYS: the count, the epoch), and the account's purge, in its slot.
        #expect(RedisHashSlot(key: keys.authEpoch(account: account)) == own)
        for minute in 28_999_997...29_000_001 { #expect(RedisHashSlot(key: keys.requestCount(account: account, minute: minute)) == own) }
        // The throttle's gate (KEYS: the address's failures, the accepted token) in `{auth}`, with the epoch's old name.
        let auth = RedisHashSlot(key: "auth")
        #expect(RedisHashSlot(key: keys.authFailures(address: "203.0.113.7")) == auth)
        #expect(RedisHashSlot(key: keys.acceptedToken(String(repeating: "ab", count: 32))) == auth)
        #expect(keys.legacyAuthEpoch(account: account) == "p:{auth}:epoch:\(account)")
        // Many accounts: many slots, not one.
        let slots = Set((0..<64).map { RedisHashSlot(key: keys.authEpoch(account: "account-\($0)")) })
        #expect(slots.count > 32)
    }

    /// A revocation advances the epoch under both names: the new one every process of this version checks, and the old
    /// one that processes of before still check during a rolling upgrade (so none of them keeps trusting a revoked
    /// token) when there is one. Neither reading an epoch nor a revocation creates the old name.
    @Test func aRevocationAdvancesTheEpochOfBeforeToo() async throws {
        try await InProcessAPI.run(bootstrapToken: Self.bootstrap) { api in
            let tokens = api.api.authentication.tokens
            let (account, token) = try await api.createAccount(bootstrap: Self.bootstrap)
            #expect(try await api.call(.GET, "/dailyroundup/changes", token: token).status == .ok)
            let legacy = RedisArgument(api.keys.legacyAuthEpoch(account: account))
            #expect(try await api.redis.send("EXISTS", legacy).int == 0, "this version reads only the new name")
            // A process of before keeps the token with the epoch it read (made, as it makes one, from the clock).
            let old = try #require(await tokens.epoch(account: "reader-of-before"))
            _ = try await api.redis.send("SET", legacy, RedisArgument(String(old)), "EX", "3600")
            let new = try #require(try await api.redis.send("GET", RedisArgument(api.keys.authEpoch(account: account))).string.flatMap { Int($0) })

            #expect(try await api.call(.POST, "/dailyroundup/account/token", token: token).status == .ok)
            let oldAfter = try #require(try await api.redis.send("GET", legacy).string.flatMap { Int($0) })
            let newAfter = try #require(
                try await api.redis.send("GET", RedisArgument(api.keys.authEpoch(account: account))).string.flatMap { Int($0) })
            #expect(oldAfter > old && newAfter > new)
            let ttl = try #require(try await api.redis.send("TTL", legacy).int)
            #expect((1...TokenCache.epochSeconds).contains(ttl), "the old name still expires by itself")
            #expect(try await api.call(.GET, "/dailyroundup/changes", token: token).status == .unauthorized)

            // No process of before keeps this account's token (no old name): none is made.
            let (other, otherToken) = try await api.createAccount(bootstrap: Self.bootstrap)
            #expect(try await api.call(.POST, "/dailyroundup/account/token", token: otherToken).status == .ok)
            #expect(try await api.redis.send("EXISTS", RedisArgument(api.keys.legacyAuthEpoch(account: other))).int == 0)
        }
    }

    /// On a Redis Cluster: tokens found and then kept are counted by a script in their account's slot, without a
    /// CROSSSLOT refusal (a request the limiter could not count would be let through uncounted), and the accounts' keys
    /// are spread over the primaries.
    @Test func onAClusterEachAccountsRequestsRunOnItsOwnPrimary() async throws {
        let shared = ProcessInfo.processInfo.environment["ROUNDUP_TEST_REDIS_CLUSTER_URL"].flatMap { $0.isEmpty ? nil : $0 }
        let cluster = shared == nil ? try await RedisCluster(masters: 3, replicasPerMaster: 0) : nil
        let url = try #require(shared ?? cluster?.url)
        do {
            try await requestsOnACluster(url)
        } catch {
            await cluster?.stop()
            throw error
        }
        await cluster?.stop()
    }

    func requestsOnACluster(_ url: String) async throws {
        try await InProcessAPI.run(bootstrapToken: Self.bootstrap, environment: ["ROUNDUP_REDIS_URL": url, "ROUNDUP_REDIS_CLUSTER": "true"]) { api in
            #expect(api.redis.isCluster)
            let topology = try #require(try await api.redis.clusterTopology())
            var primaries: Set<RedisNodeAddress> = []
            for _ in 0..<12 {
                let (account, token) = try await api.createAccount(bootstrap: Self.bootstrap)
                for _ in 0..<3 { #expect(try await api.call(.GET, "/dailyroundup/changes", token: token).status == .ok) }
                #expect(api.api.authentication.tokens.kept(AuthenticationMiddleware.hash(token)) != nil)
                // Counted every time: once when found, twice while kept (the kept path's script ran, in one slot).
                let minute = RateLimit.currentMinute()
                var counted = 0
                for window in [minute - 1, minute] {
                    counted += try await api.redis.send("GET", RedisArgument(RateLimit.key(api.keys, account: account, minute: window))).int ?? 0
                }
                #expect(counted == 3, "\(account)")
                let shard = try #require(topology.shard(serving: RedisHashSlot(key: api.keys.authEpoch(account: account))))
                primaries.insert(shard.primary)
            }
            #expect(primaries.count >= 2, "twelve accounts' keys all on \(primaries)")
        }
    }
}
