import Logging
import NIOCore
import RoundupRedis
import RoundupRuntime
import RoundupStreams

/// The accounts of bearer tokens found recently, so that most requests do not ask the store which account a token is
/// (that query, a round trip to PostgreSQL or a hop to SQLite's reader, was a fifth of a changes page's time).
///
/// A revoked token must stop working at once, on every API process. So an account found for a token is kept with its
/// account's **token epoch**, a value in Redis (`RedisKeys.authEpoch(account:)`) that every revocation of the
/// account's token — a rotation, the account's deletion — advances before the store changes and again after. A
/// request with a kept token counts against the rate limit only while the epoch is still the kept one (one script,
/// the round trip the rate limit already made, which also asks the authentication throttle:
/// `RateLimit.check(_:whileEpochIs:epochKey:after:_:unauthorized:)`); otherwise the store is asked again. Finding a token reads the epoch and then asks the store a second time, so a revocation that
/// committed before the read is seen, and one after it advances the epoch past the kept value.
///
/// Epoch values are never reused: an advance sets the larger of the value plus one and Redis's clock in microseconds
/// (`TIME`), and a missing epoch is created from the clock. So a Redis that lost recent writes (a crash within the AOF's
/// second, a failover to a replica behind, a `FLUSHALL`) cannot bring back a value that an entry was kept with.
///
/// What stays: an entry lives at most `lifetime` whatever the epoch says, the bound for the one case the epoch
/// cannot cover — Redis losing a revocation's second advance. When Redis cannot say, nothing kept is trusted and nothing
/// found is kept. Only tokens the store accepted are kept, at most `maxEntries`, and only they write an epoch, so
/// clients sending tokens that are not valid grow neither the cache nor Redis (`AuthThrottle` counts them).
struct TokenCache: Sendable {
    struct Found: Sendable {
        var account: String
        var epoch: Int
    }

    let redis: RedisClient
    let keys: RedisKeys
    let lifetime: TimeAmount
    let logger: Logger
    private let found: ExpiringCache<Found>

    /// How long an account's epoch stays in Redis after it was made or advanced (at least `lifetime`: an epoch that
    /// expired only makes the processes that kept its tokens ask the store again).
    static let epochSeconds = 3_600

    init(redis: RedisClient, keys: RedisKeys, logger: Logger, maxEntries: Int = 10_000, lifetime: TimeAmount = .seconds(30)) {
        self.redis = redis
        self.keys = keys
        self.lifetime = lifetime
        self.logger = logger
        // A token hash is 64 hex digits, an account id a UUID: about 200 bytes an entry with the cache's own.
        found = ExpiringCache(maxEntries: maxEntries, maxBytes: maxEntries * 256) { $0.account.utf8.count + 16 }
    }

    /// The account kept for a token (by its SHA-256 hex), and the epoch it was found with.
    func kept(_ tokenHash: String) -> Found? { found.value(for: tokenHash) }

    func forget(_ tokenHash: String) { found.remove(tokenHash) }

    var count: Int { found.count }

    /// A token not kept, from the store (`lookup`: the account of the token, or nil): kept when Redis gives the
    /// account's epoch (`askRedis` false: Redis just failed to answer, so it is not asked again). Nil when the store
    /// does not know the token; `epoch` is nil when nothing was kept for want of it.
    func find(_ tokenHash: String, askRedis: Bool, lookup: @Sendable () async throws -> String?) async throws -> (account: String, epoch: Int?)? {
        guard let account = try await lookup() else { return nil }
        guard askRedis, let epoch = await epoch(account: account) else { return (account, nil) }
        // The epoch read, the store must still give the token to the account: a revocation that committed before the
        // read shows here; one that commits after advances the epoch past `epoch` (its second advance).
        guard try await lookup() == account else { return nil }
        found.set(Found(account: account, epoch: epoch), for: tokenHash, lifetime: lifetime)
        return (account, epoch)
    }

    /// The account's epoch now (made from Redis's clock if it has none), or nil when Redis cannot say.
    func epoch(account: String) async -> Int? {
        do {
            let reply = try await redis.evaluate(
                Self.readEpoch, keys: [RedisArgument(keys.authEpoch(account: account))], arguments: [RedisArgument(Self.epochSeconds)],
                timeout: .milliseconds(500))
            if let epoch = reply.int { return epoch }
            logger.warning("token epoch unavailable: tokens are looked up in the store", metadata: ["reply": "\(reply)"])
        } catch {
            logger.warning("token epoch unavailable: tokens are looked up in the store", metadata: ["error": "\(error)"])
        }
        return nil
    }

    /// Advances the account's epoch: every process that kept one of its tokens asks the store again. Called before the
    /// token is revoked in the store (if Redis cannot be told, the revocation must not happen: this throws) and after
    /// (for a lookup that ran between the two).
    ///
    /// The epoch's earlier name (`RedisKeys.legacyAuthEpoch`, in `{auth}`) is advanced too when it exists,
    /// for API processes of before that still run during a rolling upgrade and check that one (one that does not exist
    /// is no value any of them kept a token with: they make it before they keep one, as `find` does). Nothing reads it
    /// in this version, so nothing needs moving at start-up: an epoch this version finds missing is made from the clock,
    /// a value no token was ever kept with, and the processes of before keep theirs under the old name until they stop
    /// (they expire an hour after their last advance). The one gap left is the other way round: a token revoked through
    /// a process of before is trusted by the new ones that kept it for `lifetime` at most, the bound a lost advance
    /// already has.
    func revoke(account: String) async throws {
        for (script, key) in [
            (Self.advanceEpoch, keys.authEpoch(account: account)), (Self.advanceLegacyEpoch, keys.legacyAuthEpoch(account: account)),
        ] {
            let reply = try await redis.evaluate(
                script, keys: [RedisArgument(key)], arguments: [RedisArgument(Self.epochSeconds)], timeout: .seconds(2))
            if case .error(let message) = reply { throw RedisClientError.reply(message, answering: "advancing the token epoch") }
        }
    }

    /// KEYS: the account's epoch; ARGV: its lifetime in seconds. The epoch, made from the clock (seconds and
    /// microseconds) when there is none.
    static let readEpoch = RedisScript(
        name: "token-epoch",
        source: """
            local epoch = redis.call('GET', KEYS[1])
            if not epoch then
              local now = redis.call('TIME')
              epoch = string.format('%.0f', tonumber(now[1]) * 1000000 + tonumber(now[2]))
              redis.call('SET', KEYS[1], epoch, 'EX', ARGV[1])
            end
            return epoch
            """)

    /// KEYS: the account's epoch; ARGV: its lifetime in seconds. Sets the larger of the epoch plus one and the clock
    /// in microseconds: never a value it had before, even after Redis lost writes.
    static let advanceEpoch = RedisScript(name: "token-epoch-advance", source: advanceLua)

    /// The same for the epoch's earlier name, only when it exists (it returns '0' when it does not).
    static let advanceLegacyEpoch = RedisScript(
        name: "token-epoch-advance-legacy", source: "if redis.call('EXISTS', KEYS[1]) == 0 then return '0' end\n" + advanceLua)

    private static let advanceLua = """
        local now = redis.call('TIME')
        local epoch = tonumber(now[1]) * 1000000 + tonumber(now[2])
        local current = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
        if current >= epoch then epoch = current + 1 end
        local text = string.format('%.0f', epoch)
        redis.call('SET', KEYS[1], text, 'EX', ARGV[1])
        return text
        """
}
