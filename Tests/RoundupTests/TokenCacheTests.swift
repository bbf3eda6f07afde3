import Foundation
import GRDB
import NIOHTTP1
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStore
import RoundupStreams
import RoundupTesting
import Testing

@testable import RoundupAPI

/// An API process keeps the account of a token it found (`TokenCache`), so most requests do not ask the store. A
/// revoked token must still stop working at once on every process, and nothing kept may be trusted when Redis cannot
/// say whether a token was revoked since.
@Suite struct TokenCacheTests {
    static let bootstrap = "bootstrap-0123456789abcdef"

    /// Two API processes over one store and one Redis: a token rotated or an account deleted through one is refused at
    /// once by the other, which had kept it.
    @Test func aTokenRevokedThroughOneProcessIsRefusedAtOnceByAnother() async throws {
        try await InProcessAPI.run(bootstrapToken: Self.bootstrap) { one in
            let (account, token) = try await one.createAccount(bootstrap: Self.bootstrap)
            try await one.sibling { other in
                #expect(try await other.call(.GET, "/dailyroundup/changes", token: token).status == .ok)
                #expect(other.api.authentication.tokens.kept(AuthenticationMiddleware.hash(token)) != nil, "the other process kept the token")
                #expect(try await other.call(.GET, "/dailyroundup/changes", token: token).status == .ok)

                let rotated = try await one.call(.POST, "/dailyroundup/account/token", token: token)
                #expect(rotated.status == .ok)
                let newToken = try #require(rotated.json["auth_token"]?.stringValue)
                #expect(try await other.call(.GET, "/dailyroundup/changes", token: token).status == .unauthorized)
                #expect(try await other.call(.GET, "/dailyroundup/changes", token: newToken).status == .ok)
                #expect(try await other.call(.GET, "/dailyroundup/account", token: newToken).status == .ok)

                #expect(try await one.call(.DELETE, "/dailyroundup/account", token: newToken).status == .noContent)
                #expect(try await other.call(.GET, "/dailyroundup/changes", token: newToken).status == .unauthorized)
                // The refused request counted nothing against the deleted account: the deletion left no key of it.
                let minute = RateLimit.currentMinute()
                for window in (minute - 1)...(minute + 1) {
                    let key = RateLimit.key(other.keys, account: account, minute: window)
                    #expect(try await other.redis.send("EXISTS", RedisArgument(key)) == .integer(0))
                }
            }
        }
    }

    /// What the epoch guards: a token changed in the store behind the API's back (no revocation through it) is still
    /// answered from what a process kept — until any revocation, or Redis going away, makes it ask the store again.
    /// Without Redis nothing kept is trusted, and a rotation is refused (503) rather than half done.
    @Test func withoutRedisNothingKeptIsTrustedAndNoTokenIsRotated() async throws {
        try await InProcessAPI.run(bootstrapToken: Self.bootstrap, privateRedis: true) { api in
            let (account, token) = try await api.createAccount(bootstrap: Self.bootstrap)
            #expect(try await api.call(.GET, "/dailyroundup/changes", token: token).status == .ok)
            let replacement = "rt_replaced-behind-the-apis-back"
            try await api.store.rotateToken(accountID: account, newTokenHash: AuthenticationMiddleware.hash(replacement))
            #expect(try await api.call(.GET, "/dailyroundup/changes", token: token).status == .ok, "kept, and no revocation said otherwise")

            let redis = try #require(api.redisServer)
            await redis.stop()
            #expect(
                try await api.call(.GET, "/dailyroundup/changes", token: token).status == .unauthorized, "Redis cannot confirm: the store is asked")
            #expect(try await api.call(.GET, "/dailyroundup/changes", token: replacement).status == .ok, "the store's token works without Redis")
            let refused = try await api.call(.POST, "/dailyroundup/account/token", token: replacement)
            #expect(refused.status == .serviceUnavailable)
            #expect(try await api.call(.GET, "/dailyroundup/account", token: replacement).status == .ok, "nothing was rotated")
            #expect(api.api.authentication.tokens.count == 0, "nothing found without Redis was kept")

            try await redis.start()
            #expect(try await api.call(.GET, "/dailyroundup/changes", token: replacement).status == .ok)
            #expect(api.api.authentication.tokens.count == 1)
            #expect(try await api.call(.GET, "/dailyroundup/changes", token: token).status == .unauthorized)
        }
    }

    /// A revocation whose store change commits between a lookup's two questions to the store is seen (nothing is
    /// kept); one that commits after them advances the epoch past the kept value. Another account's revocation leaves
    /// a kept token alone.
    @Test func aRevocationRacingALookupIsNeverMissed() async throws {
        try await InProcessAPI.run(bootstrapToken: Self.bootstrap) { api in
            let tokens = api.api.authentication.tokens
            let rateLimit = api.api.authentication.rateLimit
            let (account, token) = try await api.createAccount(bootstrap: Self.bootstrap)
            let hash = AuthenticationMiddleware.hash(token)
            let epochKey = api.keys.authEpoch(account: account)
            func count(_ epoch: Int) async throws -> RateLimit.KeptOutcome {
                try await rateLimit.check(account, whileEpochIs: epoch, epochKey: epochKey)
            }

            // Revoked between the two questions: the second says so, and nothing is kept.
            let answers = Answers([account, nil])
            #expect(try await tokens.find(hash, askRedis: true, lookup: { await answers.next() }) == nil)
            #expect(tokens.kept(hash) == nil)

            // Revoked after them: kept, but the revocation's second advance moves the epoch past it.
            let steady = Answers([account, account])
            let found = try await tokens.find(hash, askRedis: true, lookup: { await steady.next() })
            #expect(found?.account == account && found?.epoch != nil)
            let kept = try #require(tokens.kept(hash))
            #expect(try await count(kept.epoch) == .counted)
            try await tokens.revoke(account: account)
            #expect(try await count(kept.epoch) == .epochMoved)

            // Through the API: the kept token is looked up again after its account's revocation; another account's
            // rotation does not touch it.
            #expect(try await api.call(.GET, "/dailyroundup/changes", token: token).status == .ok)
            let renewed = try #require(tokens.kept(hash))
            #expect(renewed.epoch != kept.epoch)
            let (_, otherToken) = try await api.createAccount(bootstrap: Self.bootstrap)
            #expect(try await api.call(.POST, "/dailyroundup/account/token", token: otherToken).status == .ok)
            #expect(try await count(renewed.epoch) == .counted)
        }
    }

    /// An epoch never takes a value it had: not after Redis loses writes (an older value comes back), nor after it
    /// loses the key (it is made again from the clock).
    @Test func epochsNeverComeBack() async throws {
        try await InProcessAPI.run(bootstrapToken: Self.bootstrap) { api in
            let tokens = api.api.authentication.tokens
            let key = api.keys.authEpoch(account: "acct-1")
            let first = try #require(await tokens.epoch(account: "acct-1"))
            #expect(await tokens.epoch(account: "acct-1") == first, "reading does not move it")
            try await tokens.revoke(account: "acct-1")
            let second = try #require(await tokens.epoch(account: "acct-1"))
            #expect(second > first)
            _ = try await api.redis.send("SET", RedisArgument(key), RedisArgument(String(first)))  // Redis lost the advance
            try await tokens.revoke(account: "acct-1")
            let third = try #require(await tokens.epoch(account: "acct-1"))
            #expect(third > second)
            _ = try await api.redis.send("DEL", RedisArgument(key))  // and the key itself
            try await Task.sleep(for: .milliseconds(2))
            let fourth = try #require(await tokens.epoch(account: "acct-1"))
            #expect(fourth > third)
            let ttl = try #require(try await api.redis.send("TTL", RedisArgument(key)).int)
            #expect((1...TokenCache.epochSeconds).contains(ttl))
        }
    }

    /// Tokens the store does not know are never kept: a flood of them cannot grow the cache.
    @Test func tokensTheStoreRefusesAreNotKept() async throws {
        try await InProcessAPI.run(bootstrapToken: Self.bootstrap, environment: ["ROUNDUP_AUTH_FAILURE_LIMIT": "1000"]) {
            (api: InProcessAPI) async throws in
            for index in 0..<50 {
                #expect(try await api.call(.GET, "/dailyroundup/changes", token: "rt_not-a-token-\(index)").status == .unauthorized)
            }
            #expect(api.api.authentication.tokens.count == 0)
        }
    }
}

/// Answers given one after the other (the store's, as a test scripts them).
actor Answers {
    var answers: [String?]
    init(_ answers: [String?]) { self.answers = answers }
    func next() -> String? { answers.isEmpty ? nil : answers.removeFirst() }
}
