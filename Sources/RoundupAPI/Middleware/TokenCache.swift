import Logging
import NIOCore
import RoundupRedis
import RoundupRuntime

/// The accounts of bearer tokens found recently, so that most requests do not ask the store which account a token is
/// (#19: that query, a round trip to PostgreSQL or a hop to SQLite's reader, was a fifth of a changes page's time).
///
/// A revoked token must stop working at once, on every API process. So an account found for a token is kept only
/// with the **token epoch** read before the store was asked: a counter in Redis (`auth:epoch`) that every revocation
/// — a token's rotation, an account's deletion — increments before the store changes and again after. A request
/// with a kept token reads the epoch in the round trip that already counts it against the rate limit (`RateLimit`),
/// and the kept account counts only while the epoch is the one it was found with; otherwise the store is asked again.
/// When Redis cannot say, nothing kept is trusted and nothing found is kept.
///
/// What stays: a kept account lives at most `lifetime` whatever the epoch says, the bound for the one case the epoch
/// cannot cover — Redis losing the increment after a revocation (the second increment fails, or Redis restarts
/// without the write). Only tokens the store accepted are kept, at most `maxEntries`, so a client sending tokens
/// that are not valid cannot make the cache grow; they are counted by `AuthThrottle`.
struct TokenCache: Sendable {
    struct Found: Sendable {
        var account: String
        var epoch: Int
    }

    let redis: RedisClient
    let epochKey: String
    let lifetime: TimeAmount
    let logger: Logger
    private let found: ExpiringCache<Found>

    init(redis: RedisClient, keys: RedisKeys, logger: Logger, maxEntries: Int = 10_000, lifetime: TimeAmount = .seconds(30)) {
        self.redis = redis
        self.epochKey = keys.authEpoch
        self.lifetime = lifetime
        self.logger = logger
        // A token hash is 64 hex digits, an account id a UUID: about 200 bytes an entry with the cache's own.
        found = ExpiringCache(maxEntries: maxEntries, maxBytes: maxEntries * 256) { $0.account.utf8.count + 16 }
    }

    /// The account kept for a token (by its SHA-256 hex), and the epoch it was found with.
    func kept(_ tokenHash: String) -> Found? { found.value(for: tokenHash) }

    func keep(_ tokenHash: String, _ entry: Found) { found.set(entry, for: tokenHash, lifetime: lifetime) }

    func forget(_ tokenHash: String) { found.remove(tokenHash) }

    var count: Int { found.count }

    /// The token epoch now (0 before the first revocation), or nil when Redis cannot say.
    func epoch() async -> Int? {
        do {
            let reply = try await redis.send(RedisCommand("GET", [RedisArgument(epochKey)]), timeout: .milliseconds(500))
            return Self.epoch(reply)
        } catch {
            logger.warning("token epoch unavailable: tokens are looked up in the store", metadata: ["error": "\(error)"])
            return nil
        }
    }

    /// The epoch a `GET auth:epoch` reply says: absent is 0, an error reply is nil.
    static func epoch(_ reply: RedisValue) -> Int? {
        switch reply {
        case .null: return 0
        case .error: return nil
        default: return reply.int
        }
    }

    /// Every token kept anywhere is looked up again: called before a token is revoked in the store (if Redis cannot be
    /// told, the revocation must not happen: this throws) and again after (for a lookup that ran between the two).
    func revoke() async throws {
        _ = try await redis.send(RedisCommand("INCR", [RedisArgument(epochKey)]), timeout: .seconds(2))
    }
}
